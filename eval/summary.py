"""Figures from the evaluation's arrays, for metrics.json and the report: per-step statistics
over episodes, pooled PSNR, threshold crossings, per-chunk means, and the rollout and session
summaries. Values that do not exist (past the recording, no classifier) are None."""

from __future__ import annotations

import math

import numpy as np
import torch

from dreamcade.eval.health import FrameHealth, HealthBand, HealthReference
from dreamcade.eval.metrics import psnr_from_mse
from dreamcade.eval.results import Reference, Rollouts, SessionResult, action_figures
from dreamcade.eval.settings import DriftSettings


def num(x) -> float | None:
    """A JSON number: None for NaN or infinity, 5 decimals."""
    x = float(x)
    return round(x, 5) if math.isfinite(x) else None


def stats(x) -> dict:
    """Mean, standard deviation, min and max of the finite values, and their count."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x)]
    if not len(x):
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": num(x.mean()), "std": num(x.std()), "min": num(x.min()), "max": num(x.max()), "n": int(len(x))}


def pad(x: np.ndarray, length: int) -> np.ndarray:
    return np.concatenate([x, np.full(length - len(x), np.nan)])


def pooled_psnr(values: np.ndarray) -> float | None:
    """PSNR (dB) of the mean squared error behind finite per-frame PSNRs (capped ones count as
    an error of 10^(-cap/10), i.e. nothing)."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    return num(psnr_from_mse(torch.tensor((10.0 ** (-v / 10)).mean()))) if len(v) else None


def first_below(values: np.ndarray, threshold: float) -> int | None:
    """The first step (1-based) whose finite value is below `threshold`; None if none is."""
    hits = np.flatnonzero(np.isfinite(values) & (values < threshold))
    return int(hits[0]) + 1 if len(hits) else None


def per_step(values: np.ndarray) -> dict[str, list]:
    """Mean, std, min, max and count over episodes at each step of [B, T] (None where no value)."""
    ok = np.isfinite(values)
    n = ok.sum(0)
    v = np.where(ok, values, 0.0)
    mean = v.sum(0) / np.maximum(n, 1)
    std = np.sqrt((np.where(ok, values - mean, 0.0) ** 2).sum(0) / np.maximum(n, 1))
    lo, hi = np.where(ok, values, np.inf).min(0), np.where(ok, values, -np.inf).max(0)
    nan = lambda x: [num(a) if k else None for a, k in zip(x, n)]
    return {"mean": nan(mean), "std": nan(std), "min": nan(lo), "max": nan(hi), "n": n.astype(int).tolist()}


def pooled_per_step(psnrs: np.ndarray) -> np.ndarray:
    """[T]: at each step, the PSNR (dB) of the mean squared error over the episodes of [B, T]
    (NaN where none has a value). Unlike the mean of per-episode PSNRs, one identical frame
    (capped at 100 dB) cannot lift it."""
    ok = np.isfinite(psnrs)
    err = np.where(ok, 10.0 ** (-np.where(ok, psnrs, 0) / 10), 0).sum(0) / np.maximum(ok.sum(0), 1)
    return np.where(ok.any(0), psnr_from_mse(torch.from_numpy(err)).numpy(), np.nan)


def decade_steps(horizon: int) -> list[int]:
    """Steps 1, 10, 100, 1,000, ... up to `horizon`."""
    return [10 ** k for k in range(len(str(horizon))) if 10 ** k <= horizon]


def psnr_at_steps(r: Rollouts) -> dict:
    """The pooled PSNR curves (see `pooled_per_step`) read at steps 1, 10, 100, ... up to the
    horizon, for the model, the frozen frame and (a two-stage world) its own low frames widened
    bicubically, so that they are compared on one statistic (None past the recording)."""
    steps = decade_steps(len(r.generated[0]))

    def read(psnrs: np.ndarray) -> list[float | None]:
        c = pooled_per_step(psnrs)
        return [num(c[s - 1]) for s in steps]

    out = {"steps": steps, "model": read(r.psnr), "frozen_frame": read(r.static_psnr)}
    if r.bicubic_psnr is not None:
        out["bicubic"] = read(r.bicubic_psnr)
    return out


def curve(values: np.ndarray, metric: str) -> np.ndarray:
    """The summary curve over episodes that thresholds are read on: pooled for PSNR, mean for SSIM."""
    if metric == "psnr":
        return pooled_per_step(values)
    return np.array([np.nan if m is None else m for m in per_step(values)["mean"]])


def crossings(values: np.ndarray, thresholds: list[float], metric: str = "ssim") -> list[dict]:
    """For each threshold: the step at which the summary curve (see `curve`) first falls below
    it, and each episode's own first step below it."""
    summary = curve(values, metric)
    out = []
    for th in thresholds:
        eps = [first_below(v, th) for v in values]
        out.append({"threshold": th, "curve_step": first_below(summary, th), "episodes": eps,
                    "episodes_below": sum(e is not None for e in eps)})
    return out


def chunk_means(values: np.ndarray, size: int) -> list[float | None]:
    """Mean of the finite values of [B, T] over each chunk of `size` steps."""
    out = []
    for a in range(0, values.shape[1], size):
        x = values[:, a:a + size]
        out.append(num(x[np.isfinite(x)].mean()) if np.isfinite(x).any() else None)
    return out


def drift_means(drifts: list[dict], n_chunks: int) -> list[float | None]:
    """Mean drift score over episodes for each chunk (episodes whose sequence reaches it)."""
    out = []
    for k in range(n_chunks):
        x = [d["score"][k] for d in drifts if k < len(d["score"])]
        out.append(num(np.mean(x)) if x else None)
    return out


def health_summary(health: list[FrameHealth], drifts: list[dict], ref: HealthReference, size: int) -> dict:
    """Per-step curves (mean over sequences) and per-chunk means of each health number, the
    ratios to the real level, and the mean drift score per chunk."""
    T = max(map(len, health))
    out = {}
    for key in ("sharpness", "colour_distance", "nearest", "motion", "detail"):
        arr = np.stack([pad(getattr(h, key), T) for h in health])
        out[key] = {"per_step_mean": per_step(arr)["mean"], "per_chunk_mean": chunk_means(arr, size),
                    "real_level": num(getattr(ref, key)) if hasattr(ref, key) else None}
    s = out["sharpness"]["per_chunk_mean"]
    out["sharpness"]["per_chunk_ratio_to_real"] = [num(x / ref.sharpness) if x is not None and ref.sharpness > 0
                                                  else None for x in s]
    n_chunks = -(-T // size)
    out["drift_score"] = {"per_chunk_mean": drift_means(drifts, n_chunks), "chunk_frames": size,
                          "per_sequence": drifts}
    return out


def healthy_horizon(health: list[FrameHealth], band: HealthBand) -> dict:
    """The healthy horizon of each sequence (steps before its first window outside the band of
    real frames, capped at its length) and pooled over them: the worst (`min`, the headline)
    and the median; which figure left the band first, per sequence."""
    found = [band.horizon(h) for h in health]
    steps = [n for n, _ in found]
    return {"per_episode": steps, "left_by": [k for _, k in found], "min": min(steps),
            "median": num(float(np.median(steps))), "of": [len(h) for h in health], "window": band.window}


def rollout_summary(r: Rollouts, settings: DriftSettings, ref: Reference) -> dict:
    """Everything about the rollouts for metrics.json."""
    size = settings.chunk
    ref_steps = [c.reference_steps for c in r.cases]
    beats = pooled_per_step(r.psnr) - pooled_per_step(r.static_psnr)
    out = {
        "episodes": [{"store": c.path, "start": c.start, "stop": c.stop, "reference_steps": c.reference_steps}
                     for c in r.cases],
        "horizon": len(r.generated[0]), "reference_steps": {"min": min(ref_steps), "max": max(ref_steps)},
        "generated_frames_per_second": num(r.frames_per_second),
        "psnr": {"per_step": {**per_step(r.psnr), "pooled": [num(x) for x in pooled_per_step(r.psnr)]},
                 "overall": stats(r.psnr), "pooled": pooled_psnr(r.psnr),
                 "crossings": crossings(r.psnr, settings.psnr_thresholds, "psnr")},
        "ssim": {"per_step": per_step(r.ssim), "overall": stats(r.ssim),
                 "crossings": crossings(r.ssim, settings.ssim_thresholds)},
        "frozen_frame": {"psnr": {"per_step_mean": per_step(r.static_psnr)["mean"],
                                  "per_step_pooled": [num(x) for x in pooled_per_step(r.static_psnr)],
                                  "overall": stats(r.static_psnr), "pooled": pooled_psnr(r.static_psnr)},
                         "ssim": {"per_step_mean": per_step(r.static_ssim)["mean"], "overall": stats(r.static_ssim)}},
        "psnr_at_steps": psnr_at_steps(r),
        "psnr_below_frozen_frame_from_step": first_below(beats, 0.0),
        "bicubic": None if r.bicubic_psnr is None else {
            "psnr": {"per_step_pooled": [num(x) for x in pooled_per_step(r.bicubic_psnr)],
                     "overall": stats(r.bicubic_psnr), "pooled": pooled_psnr(r.bicubic_psnr)},
            "ssim": {"overall": stats(r.bicubic_ssim)},
            "colour_distance": {"per_chunk_mean": chunk_means(r.bicubic_colour, size)}},
        "healthy_horizon": healthy_horizon(r.health, ref.band),
        "real_healthy_horizon": healthy_horizon([h for h in r.real_health if len(h)], ref.band),
        "health": health_summary(r.health, r.drift, ref.health, size),
        "real_health": health_summary(r.real_health, r.real_drift, ref.health, size),
    }
    if ref.idm is not None:
        out["action_following"] = action_figures(ref.idm, {
            "accuracy": num(np.nanmean(r.action)), "per_chunk": chunk_means(r.action, size),
            "on_recorded_steps": num(np.nanmean(np.where(np.isfinite(r.real_action), r.action, np.nan))),
            "real_on_recorded_steps": num(np.nanmean(r.real_action)),
            "real_per_chunk": chunk_means(r.real_action, size),
            "ceiling": num(ref.idm.ceiling), "chance": num(ref.idm.chance), "per_key": r.per_key})
    return out


def session_summary(results: list[SessionResult], settings: DriftSettings, ref: Reference) -> dict:
    out = {"sequences": [{"store": r.seq.path, "episode": r.seq.episode, "start": r.seq.start,
                          "frames": len(r.seq.frames), "note": r.note} for r in results],
           "healthy_horizon": healthy_horizon([r.health for r in results], ref.band),
           "health": health_summary([r.health for r in results], [r.drift for r in results], ref.health,
                                    settings.chunk)}
    acts = [r.action for r in results if r.action is not None and len(r.action)]
    if acts and ref.idm is not None:
        T = max(map(len, acts))
        arr = np.stack([pad(a, T) for a in acts])
        out["action_following"] = action_figures(ref.idm, {"accuracy": num(np.nanmean(arr)),
                                                  "per_chunk": chunk_means(arr, settings.chunk),
                                                  "ceiling": num(ref.idm.ceiling), "chance": num(ref.idm.chance)})
    return out
