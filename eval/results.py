"""What an evaluation builds and measures, as plain records: the reference every evaluation of a
data set shares, the open-loop rollouts and the session results. eval.drift fills them,
eval.summary reduces them to figures, eval.report writes them out."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from dreamcade.eval.data import EvalData, RolloutCase, SessionSequence
from dreamcade.eval.health import FrameHealth, HealthBand, HealthReference
from dreamcade.eval.idm import IdmResult


@dataclass
class Reference:
    """The data, the health reference, the action classifier and the mean training frame."""

    data: EvalData
    health: HealthReference
    idm: IdmResult | None
    mean_frame: np.ndarray
    """uint8 [H, W, 3], the mean of the bank (the "mean frame" baseline)."""
    band: HealthBand
    """The band windows of real held-out frames occupy (the healthy horizon's)."""
    notes: list[str] = field(default_factory=list)

    @property
    def action_scored(self) -> bool:
        """Whether action following is a figure: a classifier that reads real frames' actions."""
        return self.idm is not None and not self.idm.unmeasured

    def summary(self) -> dict:
        return {"split": self.data.split, "held_out": self.data.held_out, "held_out_by": self.data.held_out_by,
                "health_reference": self.health.summary(),
                "health_band": self.band.summary(),
                "action_classifier": self.idm.summary() if self.idm else None}


KEPT = ("ceiling", "chance")
"""The action-following fields that stay figures when the classifier cannot read real frames."""


def action_figures(idm: IdmResult, figures: dict) -> dict:
    """The action-following section of metrics.json: `figures` (the classifier's accuracies, with
    its ceiling and chance), "from_chance" (`from_chance` of the accuracy), and "unmeasured":
    None, or why the classifier cannot read real frames' actions (IdmResult.unmeasured); then
    every accuracy is None (a list: each entry)."""
    why = idm.unmeasured
    figures = {**figures, "from_chance": from_chance(figures.get("accuracy"), figures["ceiling"], figures["chance"])}
    if why:
        figures = {k: v if k in KEPT else [None] * len(v) if isinstance(v, list) else None for k, v in figures.items()}
    return {**figures, "unmeasured": why}


def from_chance(accuracy: float | None, ceiling: float | None, chance: float | None) -> float | None:
    """Where `accuracy` lies on the way from chance (0) to the ceiling (1), 4 decimals: a world
    that shows none of the actions scores about 0 however high chance is, and under 0 where the
    classifier reads the opposite of the action given. None without an accuracy, or where the
    ceiling is not above chance."""
    if accuracy is None or ceiling is None or chance is None or not ceiling > chance:
        return None
    return round((accuracy - chance) / (ceiling - chance), 4)


@dataclass
class Rollouts:
    """Open-loop rollouts and everything measured on them; arrays are [B, T] (B episodes,
    T steps), NaN where a figure does not exist (past the recording, no classifier)."""

    cases: list[RolloutCase]
    generated: list[np.ndarray]
    psnr: np.ndarray
    ssim: np.ndarray
    static_psnr: np.ndarray
    """The frozen-frame baseline: the last context frame repeated."""
    static_ssim: np.ndarray
    health: list[FrameHealth]
    real_health: list[FrameHealth]
    drift: list[dict]
    real_drift: list[dict]
    action: np.ndarray
    real_action: np.ndarray
    frames_per_second: float
    """Generated frames per second of wall time, all episodes of a batch together."""
    bicubic_psnr: np.ndarray | None = None
    """A two-stage world's own low frames widened bicubically (the baseline of its upsampler); None for one stage."""
    bicubic_ssim: np.ndarray | None = None
    bicubic_colour: np.ndarray | None = None
    """[B, T]: the colour distance of those widened frames, the dynamics model's colours alone (its
    drift apart from the upsampler's); None for one stage."""
    per_key: dict | None = None
    """Action following of each scored control (eval.idm.per_key); None without a classifier."""


@dataclass
class SessionResult:
    """The reference-free figures of one session episode."""

    seq: SessionSequence
    health: FrameHealth
    drift: dict
    action: np.ndarray | None
    """[T-1]: whether the classifier sees action t in the transition from frame t to t+1."""
    note: str | None = None
