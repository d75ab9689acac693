"""`dreamcade eval sweep`: the same drift figures over a grid of context noise levels, sampler
steps, sampler methods and checkpoints, reduced to one row each, so that a table and a plot show what buys
stability. The data, the health reference and the action classifier are built once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dreamcade.eval.data import EvalData, RolloutCase
from dreamcade.eval.drift import evaluate_model
from dreamcade.eval.results import Reference
from dreamcade.eval.settings import DriftSettings
from dreamcade.eval.summary import rollout_summary
from dreamcade.model import config as sampling  # the sampler settings and their rules
from dreamcade.model.config import Config
from dreamcade.model.denoiser import EAGER, Denoiser, Speed


@dataclass
class SweepModel:
    """One checkpoint of the sweep, with its own held-out windows and rollout starts (its context)."""

    name: str
    step: int
    model: Denoiser
    cfg: Config
    data: EvalData
    cases: list[RolloutCase]
    speed: Speed = EAGER
    upsampling: object | None = None
    """Its second stage, for a two-stage world (model.upsampler.Upsampling)."""


def row(m: SweepModel, noise: float, used: float, sampler: sampling.SamplerConfig, summary: dict,
        one_step: dict) -> dict:
    """The sweep's figures for one setting (see COLUMNS), with the checkpoint's guidance and its
    rescale, which the sweep does not vary."""
    r = summary
    first = r["psnr"]["crossings"][0] if r["psnr"]["crossings"] else None
    drift = [x for x in r["health"]["drift_score"]["per_chunk_mean"] if x is not None]
    sharp = [x for x in r["health"]["sharpness"]["per_chunk_ratio_to_real"] if x is not None]
    act = r.get("action_following") or {}
    return {"checkpoint": m.name, "checkpoint_step": m.step, "context_noise": noise, "context_noise_used": used,
            "sampler_steps": sampler.steps, "sampler_method": sampler.method, "guidance": sampler.guidance,
            "guidance_rescale": sampler.guidance_rescale, "one_step_psnr_pooled": one_step["model"]["psnr_pooled"],
            "one_step_ssim": one_step["model"]["ssim"]["mean"], "rollout_psnr_pooled": r["psnr"]["pooled"],
            "rollout_ssim": r["ssim"]["overall"]["mean"],
            "psnr_threshold": first["threshold"] if first else None,
            "steps_to_psnr_threshold": first["curve_step"] if first else None,
            "psnr_below_frozen_frame_from_step": r["psnr_below_frozen_frame_from_step"],
            "healthy_horizon": r["healthy_horizon"]["min"], "healthy_horizon_median": r["healthy_horizon"]["median"],
            "final_drift_score": drift[-1] if drift else None, "final_sharpness_ratio": sharp[-1] if sharp else None,
            "action_accuracy": act.get("accuracy"), "frames_per_second": r["generated_frames_per_second"]}


COLUMNS = [("checkpoint", "checkpoint"), ("context_noise_used", "context noise"), ("sampler_steps", "steps"),
           ("sampler_method", "method"),
           ("one_step_psnr_pooled", "1-step PSNR"), ("rollout_psnr_pooled", "rollout PSNR"),
           ("rollout_ssim", "rollout SSIM"), ("steps_to_psnr_threshold", "steps to threshold"),
           ("psnr_below_frozen_frame_from_step", "below frozen from"), ("healthy_horizon", "healthy horizon"),
           ("final_drift_score", "final drift"),
           ("final_sharpness_ratio", "final sharpness"), ("action_accuracy", "action acc."),
           ("frames_per_second", "frames/s")]


def run_sweep(models: list[SweepModel], noises: list[float], steps: list[int], ref: Reference,
              settings: DriftSettings, device: torch.device, progress_print=print,
              methods: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """Every (checkpoint, context noise, sampler steps, sampler method): one row, and its per-step
    curves. `methods` None: each checkpoint's own sampler.method."""
    rows, curves = [], []
    for m in models:
        for noise in noises:
            for n in steps:
                for method in methods or [m.cfg.sampler.method]:
                    sampler = sampling.sampler_settings(m.cfg.sampler, steps=n, context_noise=noise, method=method)
                    used = sampling.context_noise_used(noise, m.cfg.diffusion.context_noise_max)
                    progress_print(f"{m.name}: context noise {used:g}, {n} sampler steps, {method}")
                    ev = evaluate_model(m.model, sampler, ref, m.data, m.cases, settings, device, m.speed, m.upsampling)
                    summary = rollout_summary(ev.rollouts, settings, ref)
                    rows.append(row(m, noise, used, sampler, summary, ev.one_step.summary()))
                    health = summary["health"]
                    curves.append({"checkpoint": m.name, "context_noise": noise, "sampler_steps": n,
                                   "sampler_method": method,
                                   "psnr_per_step_mean": summary["psnr"]["per_step"]["mean"],
                                   "drift_per_chunk": health["drift_score"]["per_chunk_mean"],
                                   "sharpness_ratio_per_chunk": health["sharpness"]["per_chunk_ratio_to_real"]})
    return rows, curves


def format_table(rows: list[dict]) -> str:
    """The rows as an aligned text table (for the terminal)."""
    def cell(v):
        return "-" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
    cells = [[h for _, h in COLUMNS]] + [[cell(r[k]) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in cells)


def plot_axes(rows: list[dict]) -> tuple[str, list[str]]:
    """x = context noise when several levels were swept (lines per checkpoint, steps and method),
    else x = sampler steps (lines per checkpoint and method)."""
    several = lambda k: len({r.get(k) for r in rows}) > 1
    if several("context_noise_used") or not several("sampler_steps"):
        return "context_noise_used", [k for k in ("checkpoint", "sampler_steps", "sampler_method") if several(k)] \
            or ["sampler_steps"]
    return "sampler_steps", [k for k in ("checkpoint", "sampler_method") if several(k)] or ["checkpoint"]


def best(rows: list[dict]) -> dict | None:
    """The setting with the lowest final drift score among those with the best rollout PSNR
    within 0.5 dB (a reading aid printed under the table; not a rule)."""
    ok = [r for r in rows if r["rollout_psnr_pooled"] is not None]
    if not ok:
        return None
    top = max(r["rollout_psnr_pooled"] for r in ok)
    near = [r for r in ok if r["rollout_psnr_pooled"] >= top - 0.5]
    return min(near, key=lambda r: (np.inf if r["final_drift_score"] is None else r["final_drift_score"]))

