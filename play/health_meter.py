"""The play window's live health figure: eval's reference-free health (eval.health) of the last
frames generated, against the band that windows of real frames occupy, built by eval's own
function (eval.health.HealthBand, which leaves out windows that are not gameplay) from runs of
real frames spread across the reference (play.contexts.Contexts.sample_frames)."""

from __future__ import annotations

from collections import deque

import numpy as np

from dreamcade.eval.health import FrameHealth, HealthBand, colour_distance, level_distribution, motion, sharpness

FIGURES = ("sharpness", "motion", "colour_distance")
"""eval's figures but the nearest-frame distance and detail, which need a bank of training frames."""
WARNINGS = {("sharpness", "low"): "frames are blurring", ("sharpness", "high"): "frames are turning to noise",
            ("motion", "low"): "the world has frozen", ("motion", "high"): "frames are flickering",
            ("colour_distance", "high"): "colours are leaving the game's"}


def run_health(frames: np.ndarray, levels: np.ndarray) -> FrameHealth:
    """The HUD's figures of one run of consecutive frames (nearest-frame distance and histograms
    left at 0: the HUD does not use them)."""
    n = len(frames)
    return FrameHealth(sharpness(frames), colour_distance(frames, levels), np.zeros(n), np.zeros((n, 3, 1)),
                       motion(frames), np.ones(n))


class Health:
    """Live health over the last `window` generated frames: sharpness, motion and colour distance,
    each a window mean checked against the band of real frames' windows (eval.health.HealthBand).
    `value` is the window's sharpness over that of the median real frame (1 is like the data),
    for the HUD."""

    def __init__(self, real_frames: np.ndarray | list[np.ndarray], window: int = 30) -> None:
        """`real_frames`: runs of consecutive real frames (uint8 [n, H, W, 3] each; best spread
        across the game and `window` long), or one such array."""
        runs = [np.asarray(r) for r in ([real_frames] if isinstance(real_frames, np.ndarray) else real_frames)]
        self.levels = level_distribution(np.concatenate(runs))  # as eval's: the colours of frames spread evenly
        health = [run_health(r, self.levels) for r in runs]
        self.reference = float(np.median(np.concatenate([h.sharpness for h in health])))
        self.band = HealthBand.build(health, window, FIGURES)
        self.recent = {k: deque(maxlen=window) for k in FIGURES}
        self.previous: np.ndarray | None = None  # the last frame, [1, H, W, 3]
        self.value: float | None = None
        self.out: tuple[str, str] | None = None

    def reset(self) -> None:
        for d in self.recent.values():
            d.clear()
        self.previous, self.value, self.out = None, None, None

    def update(self, frame: np.ndarray) -> float | None:
        """Add one generated frame (uint8 [H, W, 3]); returns the sharpness ratio (None on flat data)."""
        f = np.asarray(frame)[None]
        self.recent["sharpness"].append(float(sharpness(f)[0]))
        self.recent["colour_distance"].append(float(colour_distance(f, self.levels)[0]))
        if self.previous is not None:  # eval's motion of the frame after the one before
            self.recent["motion"].append(float(motion(np.concatenate([self.previous, f]))[1]))
        self.previous = f
        means = {k: float(np.mean(d)) for k, d in self.recent.items() if d}
        self.out = next(((k, side) for k in FIGURES if k in means
                         if (side := self.band.leaves(k, means[k]))), None)
        self.value = means["sharpness"] / self.reference if self.reference >= 1e-6 else None
        return self.value

    @property
    def warning(self) -> str | None:
        if self.out is None:
            return None
        return f"{WARNINGS[self.out]}: press R to reset, or raise the context noise (=)"
