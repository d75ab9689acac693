"""Reference-free health of frames: numbers that need no ground truth, so they also run on a
free-running session. Each is compared with the same number on real frames of the data.

- sharpness: variance of the Laplacian of the luma, in [0, 1] units squared (0 for a flat
  frame; a blurred frame scores lower, noise scores higher).
- colour distance: how far, in levels, a frame's colours must move to match the data's colour
  distribution: the earth mover's (Wasserstein-1) distance between the frame's distribution of
  the 256 levels and the data's, per channel, mean over R, G, B, in [0, 1] units (0 = the same
  distribution; a frame with every value k levels higher scores k / 255; all black against all
  white 1). It is continuous in the values: a pixel one level off costs one level, however the
  levels fall (a binned histogram would count the same pixel as a whole colour lost when it
  crosses a bin edge).
- nearest: RMSE in [0, 1] units to the nearest frame of a bank of training frames (0 = a copy
  of a training frame; real unseen frames sit at some typical distance).
- detail: a frame's sharpness over that of the training frame nearest to it (1 = as much edge as
  the game shows there; a blurred view of a brick wall scores far below 1 even where a flat wall,
  seen up close, is as dull as the blur: sharpness alone cannot tell them apart on a view that
  moves, where the real frames pass through both).
- motion: mean absolute change from the previous frame, in [0, 1] units (0 for a frozen
  picture; flicker and noise score high).
- drift score: each chunk of a sequence against its first chunk (see `drift_score`).
- healthy horizon: the first step at which a sequence's health, averaged over a window of
  steps, leaves the band that windows of real frames occupy (see `HealthBand`); windows of real
  frames that are not gameplay (a fade, a black screen) are left out of the band (`gameplay`).
  Play's HUD builds its band with the same function.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from dreamcade.dataset.pixels import hwc_to_unit

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601
BINS = 16  # colour histogram bins per channel (256 levels / 16), for the drift score
LEVELS = 256
LAPLACIAN = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
SHARPNESS_FLOOR = 0.05  # share of the real frames' sharpness below which a chunk counts as flat


def sharpness(frames) -> np.ndarray:
    """Variance of the Laplacian of the luma per frame, [N], in [0, 1] units squared, over the
    pixels whose 3x3 neighbourhood lies inside the frame. A 0/255 checkerboard scores 16."""
    x = hwc_to_unit(frames)
    luma = (x * torch.tensor(LUMA)[None, :, None, None]).sum(1, keepdim=True)  # [N, 1, H, W]
    lap = F.conv2d(luma, LAPLACIAN[None, None])  # [N, 1, H-2, W-2]
    return lap.flatten(1).var(1, unbiased=False).numpy().astype(np.float64)


def motion(frames) -> np.ndarray:
    """Mean absolute change of each frame from the one before, [N], in [0, 1] units; the first
    frame takes the second's value (a single frame: 0)."""
    x = hwc_to_unit(frames)
    if len(x) < 2:
        return np.zeros(len(x))
    d = (x[1:] - x[:-1]).abs().flatten(1).mean(1).double().numpy()
    return np.concatenate([d[:1], d])


def frame_histograms(frames, bins: int = BINS) -> np.ndarray:
    """Colour histogram of each frame, float64 [N, 3, bins], each channel summing to 1."""
    f = np.asarray(frames)
    n, h, w, _ = f.shape
    level = f.astype(np.int64) * bins // 256  # [N, H, W, 3] bin of each value
    key = (np.arange(n)[:, None, None, None] * 3 + np.arange(3)) * bins + level
    counts = np.bincount(key.ravel(), minlength=n * 3 * bins).reshape(n, 3, bins)
    return counts / float(h * w)


def histogram_distance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Total variation distance of histograms [..., 3, bins], mean over channels: [...] in [0, 1]."""
    return 0.5 * np.abs(p - q).sum(-1).mean(-1)


def level_distribution(frames) -> np.ndarray:
    """The share of each of the 256 levels per channel, mean over `frames`: float64 [3, 256]."""
    return frame_histograms(frames, LEVELS).mean(0)


def colour_distance(frames, levels: np.ndarray, batch: int = 256) -> np.ndarray:
    """Earth mover's distance of each frame's level distribution to `levels` ([3, 256], from
    `level_distribution`), mean over channels, in [0, 1] units: [N] float64. In one dimension it
    is the area between the two cumulative distributions."""
    f = np.asarray(frames)
    target = np.cumsum(levels, -1)
    out = [np.abs(np.cumsum(frame_histograms(f[a:a + batch], LEVELS), -1) - target).sum(-1).mean(-1) / (LEVELS - 1)
           for a in range(0, len(f), batch)]
    return np.concatenate(out) if out else np.zeros(0)


def nearest(frames, bank, batch: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """RMSE (in [0, 1] units) of each frame to its nearest bank frame, and that frame's index:
    ([N] float64, [N] int64). The search uses |x|^2 + |b|^2 - 2 x.b; the returned distance is
    recomputed exactly for the chosen frame."""
    b = hwc_to_unit(bank).flatten(1)  # [M, D]
    b2 = (b * b).sum(1)
    dist, index = [], []
    for a in range(0, len(frames), batch):  # frames made float a batch at a time: 10,000 screen-size frames are gigabytes
        x = hwc_to_unit(frames[a:a + batch]).flatten(1)
        d2 = (x * x).sum(1, keepdim=True) + b2[None] - 2 * x @ b.T  # [n, M]
        i = d2.argmin(1)
        dist.append(((x - b[i]) ** 2).mean(1).sqrt())
        index.append(i)
    if not dist:
        return np.zeros(0), np.zeros(0, np.int64)
    return torch.cat(dist).double().numpy(), torch.cat(index).numpy()


@dataclass
class HealthReference:
    """What health is compared with: a bank of training frames, the data's colour distribution,
    and the mean of each health number on real held-out frames."""

    bank: np.ndarray
    """uint8 [M, H, W, 3], frames sampled evenly from the training episodes."""
    levels: np.ndarray
    """[3, 256], the share of each level per channel in the bank."""
    sharpness: float
    """Mean sharpness of real held-out frames."""
    colour_distance: float
    """Mean colour distance of real held-out frames to `levels`."""
    nearest: float
    """Mean nearest-bank RMSE of real held-out frames (0 when they are in the bank)."""
    spread: float
    """Mean RMSE between two different bank frames: how far apart real frames are."""
    bank_sharpness: np.ndarray
    """[M], the sharpness of each bank frame (for the detail figure)."""

    @classmethod
    def build(cls, bank: np.ndarray, real: np.ndarray, seed: int = 0) -> HealthReference:
        """From the bank and a sample of real held-out frames (both uint8 [N, H, W, 3])."""
        levels = level_distribution(bank)
        order = np.random.default_rng(seed).permutation(len(bank))
        pairs = hwc_to_unit(bank[order]) - hwc_to_unit(bank[np.roll(order, len(bank) // 2)])  # never a frame with itself
        return cls(bank, levels, float(sharpness(real).mean()), float(colour_distance(real, levels).mean()),
                   float(nearest(real, bank)[0].mean()), float(pairs.pow(2).flatten(1).mean(1).sqrt().mean()),
                   sharpness(bank))

    def detail_ratio(self, frames_sharpness: np.ndarray, nearest_index: np.ndarray) -> np.ndarray:
        """Each frame's sharpness over its nearest bank frame's, [N]; both count as at least
        SHARPNESS_FLOOR of the real frames' sharpness (a flat frame near a flat frame is 1)."""
        floor = max(SHARPNESS_FLOOR * self.sharpness, 1e-12)
        return np.maximum(frames_sharpness, floor) / np.maximum(self.bank_sharpness[nearest_index], floor)

    def summary(self) -> dict:
        return {"bank_frames": int(len(self.bank)), "sharpness": self.sharpness,
                "colour_distance": self.colour_distance, "nearest": self.nearest, "spread": self.spread}


@dataclass
class FrameHealth:
    """Health of each frame of one sequence, all [T]."""

    sharpness: np.ndarray
    colour_distance: np.ndarray
    nearest: np.ndarray
    histograms: np.ndarray
    """[T, 3, BINS], kept for the chunked drift score."""
    motion: np.ndarray
    detail: np.ndarray

    def __len__(self) -> int:
        return len(self.sharpness)

    def curves(self) -> dict[str, np.ndarray]:
        return {"sharpness": self.sharpness, "colour_distance": self.colour_distance, "nearest": self.nearest,
                "motion": self.motion, "detail": self.detail}


def frame_health(frames: np.ndarray, ref: HealthReference, batch: int = 256) -> FrameHealth:
    """Health of each frame of `frames` (uint8 [T, H, W, 3]) against `ref`, `batch` frames at a
    time (a long session at the size of the screen does not fit in memory as floats)."""
    sharp, hist, move = [np.zeros(0)], [np.zeros((0, 3, BINS))], [np.zeros(0)]
    for a in range(0, len(frames), batch):
        sharp.append(sharpness(frames[a:a + batch]))
        hist.append(frame_histograms(frames[a:a + batch]))
        move.append(motion(frames[max(a - 1, 0):a + batch])[1 if a else 0:])  # the frame before the batch too
    sharp = np.concatenate(sharp)
    dist, index = nearest(frames, ref.bank)
    return FrameHealth(sharp, colour_distance(frames, ref.levels), dist, np.concatenate(hist), np.concatenate(move),
                       ref.detail_ratio(sharp, index))


BAND_FACTOR = 2.0  # how far outside the real windows' range a figure may go and still count as healthy
LEVEL_FLOOR = 2 / 255
"""The lowest the upper end of the colour-distance and nearest-RMSE bands may be: two levels of
255. Where every real frame has the same colours (one block on one background), twice the real
figure is 0, and a frame drawn one level off everywhere would leave a band no eye can see."""
FIGURES = ("sharpness", "detail", "motion", "colour_distance", "nearest")


OUTLIER_IQR = 3.0
"""Tukey's far-out fences: a real window whose figure lies more than this many interquartile
ranges beyond the quartiles of the real windows (on a log scale) is not gameplay."""
LOG_FLOOR = 1e-4
"""Figures below this count as this on the log scale (no eye tells them apart): a black screen's
sharpness of 0 is far below the game's, not infinitely far."""
LOOKS = ("sharpness", "colour_distance")
"""The figures that say whether a window looks like the game: its edges and its colours (not
its motion: a player standing still is playing; not the nearest-frame distance: fades are in
the bank too)."""


def window_means(values: np.ndarray, window: int) -> np.ndarray:
    """Means of consecutive windows of `window` steps (the last may be shorter)."""
    return np.array([values[a:a + window].mean() for a in range(0, len(values), window)])


def gameplay(means: dict[str, np.ndarray]) -> np.ndarray:
    """bool [W]: which real windows are gameplay, from the window means of each figure ([W]
    each). A window is left out when its sharpness or colour distance lies beyond Tukey's far-out
    fences over the windows: more than OUTLIER_IQR interquartile ranges past the quartiles, and
    more than a factor BAND_FACTOR, on a log scale (a figure that barely varies sheds no window
    over a hair). Fades and black screens go while they are under a quarter of the windows (the
    quartiles hold); clean gameplay seldom sheds one."""
    keep = np.ones(len(next(iter(means.values()))), bool)
    for v in (means[k] for k in LOOKS if k in means):
        x = np.log(np.maximum(v, LOG_FLOOR))
        q1, q3 = np.quantile(x, [0.25, 0.75])
        reach = max(OUTLIER_IQR * (q3 - q1), np.log(BAND_FACTOR))
        keep &= (x >= q1 - reach) & (x <= q3 + reach)
    return keep


@dataclass
class HealthBand:
    """The band real frames occupy, per figure, for windows of `window` steps: a generated
    window is healthy when each figure lies within it. From the windows of real frames that are
    gameplay (see `gameplay`): sharpness, detail and motion in [lowest real / 2, highest real x 2]
    (catches blur, a frozen world, flicker and noise; detail catches blur where the game itself
    has dull views), colour distance and nearest-frame RMSE at
    most 2 x the highest real, and never below `LEVEL_FLOOR` (catches colours and shapes leaving
    the data). One function for eval's healthy horizon and play's HUD."""

    window: int
    low: dict[str, float]
    high: dict[str, float]
    windows: int = 0
    """Real windows it was built from."""
    left_out: int = 0
    """Of those, the ones that were not gameplay (see `gameplay`)."""

    @classmethod
    def build(cls, real: list[FrameHealth], window: int, figures: tuple[str, ...] = FIGURES) -> HealthBand:
        """From the health of real sequences (frames consecutive within each), in windows of
        `window` steps."""
        means = {k: np.concatenate([window_means(getattr(h, k), window) for h in real if len(h)]) for k in figures}
        keep = gameplay(means)
        means = {k: v[keep] for k, v in means.items()}
        low = {k: float(means[k].min()) / BAND_FACTOR if k in ("sharpness", "detail", "motion") else 0.0
               for k in figures}
        high = {k: float(means[k].max()) * BAND_FACTOR for k in figures}
        for k in ("colour_distance", "nearest"):
            if k in high:
                high[k] = max(high[k], LEVEL_FLOOR)
        return cls(window, low, high, len(keep), int((~keep).sum()))

    def leaves(self, figure: str, mean: float) -> str | None:
        """"low" or "high" when a window mean of `figure` lies outside the band, else None."""
        return "low" if mean < self.low[figure] else "high" if mean > self.high[figure] else None

    def outside(self, h: FrameHealth) -> list[tuple[int, str]]:
        """(start step, figure) of each window of `h` with a figure outside the band."""
        out = []
        for k in self.low:
            for i, m in enumerate(window_means(getattr(h, k), self.window)):
                if self.leaves(k, m):
                    out.append((i * self.window, k))
        return sorted(out, key=lambda x: (x[0], FIGURES.index(x[1])))

    def horizon(self, h: FrameHealth) -> tuple[int, str | None]:
        """The healthy horizon of one sequence: the steps before the first window that leaves
        the band, and the figure that left it; (len(h), None) when no window does."""
        out = self.outside(h)
        return (out[0][0], out[0][1]) if out else (len(h), None)

    def summary(self) -> dict:
        return {"window": self.window, "low": self.low, "high": self.high, "factor": BAND_FACTOR,
                "windows": self.windows, "left_out": self.left_out}


def chunk_bounds(length: int, size: int) -> list[tuple[int, int]]:
    """[start, stop) of consecutive chunks of `size` frames (the last one may be shorter)."""
    return [(a, min(a + size, length)) for a in range(0, length, size)]


def drift_score(h: FrameHealth, size: int, ref: HealthReference) -> dict[str, list]:
    """Each chunk of `size` frames against the first chunk, on health alone. Per chunk:

    - sharpness_change: log2 of its mean sharpness over the first chunk's (-1 = half as sharp;
      sharpness below SHARPNESS_FLOOR of the real frames' counts as that floor),
    - colour_shift: total variation distance of its pooled colour histogram to the first's,
    - nearest_change: how much farther its frames are from the training frames than the first
      chunk's, in units of the spread of the real frames (1 = moved away from the data by as
      much as two real frames differ),
    - score: |sharpness_change| + colour_shift + |nearest_change|; 0 when the chunk looks like
      the first, and each term reaches 1 at a clear change (half or twice the sharpness, colours
      moved to other levels entirely, a frame's worth of distance from the data).
    """
    bounds = chunk_bounds(len(h), size)
    floor = max(SHARPNESS_FLOOR * ref.sharpness, 1e-12)
    s = [max(float(h.sharpness[a:b].mean()), floor) for a, b in bounds]
    d = [float(h.nearest[a:b].mean()) for a, b in bounds]
    hist = [h.histograms[a:b].mean(0) for a, b in bounds]
    sc = [float(np.log2(x / s[0])) for x in s]
    cs = [float(histogram_distance(x, hist[0])) for x in hist]
    nc = [(x - d[0]) / max(ref.spread, 1.0 / 255) for x in d]
    return {"start": [a for a, _ in bounds], "stop": [b for _, b in bounds], "sharpness_change": sc,
            "colour_shift": cs, "nearest_change": nc,
            "score": [abs(a) + b + abs(c) for a, b, c in zip(sc, cs, nc)]}
