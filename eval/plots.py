"""The report's PNG plots (matplotlib, Agg backend): quality against step, health against time,
and the sweep."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from dreamcade.eval.health import FrameHealth, HealthReference  # noqa: E402

GEN, REAL, BASE = "tab:blue", "tab:green", "tab:gray"


def _steps(n: int) -> np.ndarray:
    return np.arange(1, n + 1)


def _band(ax, values: np.ndarray, colour: str, label: str, mean_line: bool = True) -> None:
    """Per-episode lines (thin), a mean +- std band and (unless told not to) the mean over [B, T]."""
    ok = np.isfinite(values)
    if not ok.any():
        return
    x = _steps(values.shape[1])
    n = np.maximum(ok.sum(0), 1)
    mean = np.where(ok, values, 0).sum(0) / n
    std = np.sqrt(np.where(ok, (values - mean) ** 2, 0).sum(0) / n)
    mean, std = np.where(ok.any(0), mean, np.nan), np.where(ok.any(0), std, np.nan)
    for v in values:
        ax.plot(x, v, color=colour, lw=0.5, alpha=0.3)
    ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.15, lw=0, label=None if mean_line else label)
    if mean_line:
        ax.plot(x, mean, color=colour, lw=1.8, label=label)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_quality(path: Path, psnr: np.ndarray, ssim: np.ndarray, static_psnr: np.ndarray, static_ssim: np.ndarray,
                 psnr_thresholds: list[float], ssim_thresholds: list[float]) -> Path:
    """PSNR and SSIM against step: each episode (thin), the curve over episodes (PSNR pooled,
    SSIM mean) with a +- std band, the frozen-frame baseline, the thresholds."""
    from dreamcade.eval.summary import curve

    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, v, s, th, metric, name in ((axes[0], psnr, static_psnr, psnr_thresholds, "psnr", "PSNR (dB)"),
                                       (axes[1], ssim, static_ssim, ssim_thresholds, "ssim", "SSIM")):
        _band(ax, v, GEN, "model: each episode, ± std", mean_line=False)
        ax.plot(_steps(v.shape[1]), curve(v, metric), color="navy", lw=1.8,
                label="model, " + ("pooled over episodes" if metric == "psnr" else "mean over episodes"))
        ax.plot(_steps(s.shape[1]), curve(s, metric), color=BASE, ls="--", lw=1.2, label="frozen last frame")
        for t in th:
            ax.axhline(t, color="tab:red", ls=":", lw=0.8)
        ax.set_xlabel("step (generated frames after the real context)")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="best")
    axes[0].set_title("open-loop rollouts against the recording")
    axes[1].set_title("red dotted: thresholds")
    return _save(fig, path)


def _health_lines(ax, health: list[FrameHealth], key: str, colour: str, label: str, scale: float = 1.0) -> None:
    T = max(map(len, health))
    arr = np.stack([np.concatenate([getattr(h, key), np.full(T - len(h), np.nan)]) for h in health]) / scale
    _band(ax, arr, colour, label)


def _chunk_steps(ax, starts: list[int], values: list, colour: str, label: str, ls: str = "-") -> None:
    """A step line over chunks starting at `starts` (0-based), drawn in 1-based steps."""
    v = np.array([np.nan if x is None else x for x in values], np.float64)
    if np.isfinite(v).any():
        ax.step(np.array(starts) + 1, v, where="post", color=colour, ls=ls, lw=1.6, label=label)


def plot_health(path: Path, ref: HealthReference, series: list[dict], title: str) -> Path:
    """Health against time: sharpness (as a ratio to real frames), colour distance to the data,
    distance to the nearest training frame, the chunked drift score, and action following.
    Each series is {"label", "colour", "health": [FrameHealth], "drift": [per-chunk score], "starts",
    "action": per-chunk accuracy or None}; real levels are dashed."""
    fig, axes = plt.subplots(1, 5, figsize=(20, 3.6))
    panels = [("sharpness", "sharpness / real frames'", ref.sharpness or 1.0, 1.0),
              ("colour_distance", "colour distance to the data", 1.0, ref.colour_distance),
              ("nearest", "RMSE to nearest training frame", 1.0, ref.nearest)]
    for ax, (key, name, scale, level) in zip(axes, panels):
        for s in series:
            _health_lines(ax, s["health"], key, s["colour"], s["label"], scale)
        ax.axhline(level, color=REAL, ls="--", lw=1, label="real frames (mean)")
        ax.set_ylabel(name)
    ax = axes[3]
    for s in series:
        _chunk_steps(ax, s["starts"], s["drift"], s["colour"], s["label"], s.get("ls", "-"))
    ax.set_ylabel("drift score (vs first chunk)")
    ax = axes[4]
    for s in series:
        if s.get("action") is not None:
            _chunk_steps(ax, s["starts"], s["action"], s["colour"], s["label"], s.get("ls", "-"))
    for value, name, ls in series[0].get("action_levels", []):
        ax.axhline(value, color=BASE, ls=ls, lw=1, label=name)
    ax.set_ylabel("action-following accuracy")
    ax.set_ylim(0, 1.02)
    for ax in axes:
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
    axes[0].set_title(title, loc="left")
    return _save(fig, path)


def plot_sweep(path: Path, rows: list[dict], x_key: str, group_keys: list[str], ceiling: float | None = None) -> Path:
    """Rollout PSNR, final drift score, action following (with the classifier's ceiling on real
    transitions) and one-step PSNR against `x_key`, one line per combination of `group_keys`."""
    panels = [("rollout_psnr_pooled", "rollout PSNR, pooled (dB)"), ("final_drift_score", "drift score, last chunk"),
              ("action_accuracy", "action-following accuracy"), ("one_step_psnr_pooled", "one-step PSNR, pooled (dB)")]
    fig, axes = plt.subplots(1, len(panels), figsize=(18, 3.8))
    groups = sorted({tuple(r[k] for k in group_keys) for r in rows}, key=str)
    for ax, (key, name) in zip(axes, panels):
        for g in groups:
            pts = sorted((r[x_key], r[key]) for r in rows if tuple(r[k] for k in group_keys) == g and r[key] is not None)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=", ".join(f"{k}={v}" for k, v in zip(group_keys, g)))
        if key == "action_accuracy" and ceiling is not None:
            ax.axhline(ceiling, color=BASE, ls="--", lw=1, label="ceiling: real transitions")
            ax.legend(fontsize=7, loc="best")
        ax.set_xlabel(x_key.replace("_", " "))
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    return _save(fig, path)
