"""Build a training store from raw recordings: crop, resize, resample the frame rate, shift
actions by the player's lag, drop idle stretches. The result has the recording schema.

Per episode of each source, on the source's own timeline:
1. action lag of k frames: frame i is paired with the input recorded at i - k, so the first k
   frames of the episode are dropped (there is no input for them);
2. idle stretches (no input and no change on screen for longer than --drop-idle seconds) and
   dark frames (mean level below --drop-dark, with the fade that leads into them: a death's fade to
   black, a loading screen) are cut out, and the frames after a cut start a new episode;
3. frame rate: every `factor`-th frame is kept and the actions of the frames in between are
   merged into it: a binary input held in any merged frame stays held, mouse deltas add up,
   other continuous inputs (sticks, triggers) take the last value, and an exclusive (one-hot)
   spec keeps the action held for most of the merged frames.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from dreamcade.dataset.controls import BINARY, ControlSpec, SpecError
from dreamcade.dataset.store import Store, StoreError, StoreWriter, open_store, store_output

IDLE_PIXEL_DIFF = 1.0  # mean absolute change (0-255) below which two frames count as the same
FADE_STEP = 1.0  # a frame at least this much darker (mean level) than the one before continues a fade
BLOCK = 256  # frames read and resized at a time


@dataclass(frozen=True)
class BuildOptions:
    size: tuple[int, int]
    """(width, height) of the training frames, positive, no larger than the (cropped) source; any
    size (the model pads frames to what its network halves evenly, model/unet.py)."""
    fps: float | None = None
    """Target frame rate; None keeps the source rate. Must divide the source rate (30 -> 15)."""
    crop: tuple[int, int, int, int] | None = None
    """(x, y, width, height) in source pixels, applied before resizing."""
    action_lag_ms: float = 0.0
    """Delay the actions by this much (the game's or the player's latency), rounded to frames."""
    drop_idle_s: float | None = None
    """Cut stretches with no input and no change on screen longer than this; None keeps all."""
    drop_dark: float | None = None
    """Cut frames whose mean level (0-255, after crop and resize) is below this, and the fade into
    each run of them (the frames before it, each darker than the one before); None keeps all."""

    def check(self) -> None:
        """Values that no source can make right, refused before anything is read."""
        w, h = self.size
        if w <= 0 or h <= 0:
            raise StoreError(f"--size {w}x{h}: width and height must be positive, e.g. 64x64 or 64x36")
        if self.fps is not None and not self.fps > 0:
            raise StoreError(f"--fps {self.fps:g}: the frame rate must be positive (leave it out to keep "
                             "the source rate)")
        if not self.action_lag_ms >= 0:
            raise StoreError(f"--action-lag {self.action_lag_ms:g}: the lag must be 0 or more milliseconds "
                             "(actions are delayed, never advanced)")
        if self.drop_idle_s is not None and not self.drop_idle_s > 0:
            raise StoreError(f"--drop-idle {self.drop_idle_s:g}: must be a positive number of seconds "
                             "(leave it out to keep idle stretches)")
        if self.drop_dark is not None and not 0 < self.drop_dark <= 255:
            raise StoreError(f"--drop-dark {self.drop_dark:g}: must be a mean level between 0 and 255, e.g. 40 "
                             "(leave it out to keep dark frames)")


def merge_actions(spec: ControlSpec, actions: np.ndarray) -> np.ndarray:
    """Merge consecutive action rows [n, A] into one row [A] (rules in the module docstring)."""
    if spec.exclusive:
        return spec.one_hot(int(np.bincount(actions.argmax(axis=1), minlength=len(spec)).argmax()))
    out = np.empty(len(spec), np.float32)
    for i, c in enumerate(spec.controls):
        col = actions[:, i]
        if c.kind == BINARY:
            out[i] = col.max()
        elif c.source.startswith("mouse:d"):
            out[i] = col.sum()
        else:
            out[i] = col[-1]
    return out


def idle_row(spec: ControlSpec) -> np.ndarray:
    """The action of a frame with no input."""
    return spec.one_hot(0) if spec.exclusive else np.zeros(len(spec), np.float32)


def fps_factor(src_fps: float, fps: float | None, where: str) -> int:
    if fps is None:
        return 1
    factor = src_fps / fps
    if fps <= 0 or factor < 1 - 1e-6 or abs(factor - round(factor)) > 1e-3:
        raise StoreError(f"{where}: --fps {fps:g} does not divide the recording's {src_fps:g} fps; "
                         f"choose {src_fps:g} divided by a whole number (e.g. {src_fps / 2:g})")
    return int(round(factor))


def check_size(store: Store, opts: BuildOptions) -> None:
    w, h = opts.size
    if opts.crop:
        x, y, cw, ch = opts.crop
        if x < 0 or y < 0 or cw <= 0 or ch <= 0 or x + cw > store.width or y + ch > store.height:
            raise StoreError(f"{store.path}: --crop {x},{y},{cw},{ch} does not fit inside its "
                             f"{store.width}x{store.height} frames")
        sw, sh = cw, ch
    else:
        sw, sh = store.width, store.height
    if w > sw or h > sh:
        raise StoreError(f"{store.path}: --size {w}x{h} is larger than its {sw}x{sh} "
                         f"{'cropped ' if opts.crop else ''}frames; choose a size no larger")


def transform(frames: np.ndarray, opts: BuildOptions) -> np.ndarray:
    """Crop and area-resize a block of frames [n, H, W, 3] to [n, h, w, 3]."""
    if opts.crop:
        x, y, cw, ch = opts.crop
        frames = frames[:, y:y + ch, x:x + cw]
    if frames.shape[2] == opts.size[0] and frames.shape[1] == opts.size[1]:
        return np.ascontiguousarray(frames)
    return np.stack([cv2.resize(f, opts.size, interpolation=cv2.INTER_AREA) for f in frames])


@dataclass
class Segment:
    """Source frame indices kept for one output episode, and the action of each."""

    frames: np.ndarray  # int64 [n], indices into the source store
    actions: np.ndarray  # float32 [n, A]


def plan_episode(store: Store, start: int, stop: int, opts: BuildOptions, factor: int,
                 episode_no: int) -> list[Segment]:
    """The output episodes (segments) made from source frames [start, stop)."""
    spec = store.spec
    lag = int(round(opts.action_lag_ms / 1000.0 * store.fps))
    n = stop - start
    if lag >= n - 1:
        raise StoreError(f"{store.path}: episode {episode_no} (frames {start}-{stop - 1}) has {n} "
                         f"frames, too few for an action lag of {opts.action_lag_ms:g} ms "
                         f"({lag} frames at {store.fps:g} fps); use a smaller --action-lag")
    actions = store.read_actions(start, stop)
    idx = np.arange(start + lag, stop)
    acts = actions[: n - lag]
    pieces = [(idx, acts)]
    if opts.drop_idle_s or opts.drop_dark:
        pieces = cut(idx, acts, kept_frames(store, idx, acts, opts, spec))
    segments = []
    for pidx, pacts in pieces:
        picks = np.arange(0, len(pidx), factor)
        if len(picks) < 2:
            continue
        bounds = list(picks) + [len(pidx)]
        merged = np.stack([merge_actions(spec, pacts[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])
        segments.append(Segment(pidx[picks], merged))
    return segments


def kept_frames(store: Store, idx: np.ndarray, acts: np.ndarray, opts: BuildOptions,
                spec: ControlSpec) -> np.ndarray:
    """Which frames of one episode survive --drop-idle and --drop-dark (bool [n])."""
    level = np.empty(len(idx))
    still = np.zeros(len(idx), bool)
    prev = None
    for a in range(0, len(idx), BLOCK):
        block = transform(store.read_frames(int(idx[a]), int(idx[min(len(idx), a + BLOCK) - 1]) + 1),
                          opts).astype(np.int16)
        level[a:a + len(block)] = block.mean(axis=(1, 2, 3))
        if prev is not None:
            block = np.concatenate([prev[None], block])
        diff = np.abs(np.diff(block, axis=0)).mean(axis=(1, 2, 3)) < IDLE_PIXEL_DIFF
        still[a + (prev is None):a + len(block) - (prev is not None)] = diff
        prev = block[-1]
    keep = np.ones(len(idx), bool)
    if opts.drop_idle_s:
        idle = (acts == idle_row(spec)).all(axis=1) & still
        min_run = int(math.ceil(opts.drop_idle_s * store.fps))
        for i, j in runs(idle):
            if j - i > min_run:
                keep[i:j] = False
    if opts.drop_dark:
        for i, j in runs(level < opts.drop_dark):
            m = i - 1  # back over the fade that leads into it: frames each darker than the one before
            while m > 0 and level[m - 1] - level[m] >= FADE_STEP:
                m -= 1
            keep[m + 1:j] = False
    return keep


def runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """The [start, stop) runs of True in a bool array."""
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))


def cut(idx: np.ndarray, acts: np.ndarray, keep: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The runs of kept frames of one episode, each a new episode."""
    return [(idx[i:j], acts[i:j]) for i, j in runs(keep)]


def open_sources(paths: list[str | Path]) -> list[Store]:
    stores = [open_store(p) for p in paths]
    first = stores[0]
    for s in stores[1:]:
        try:
            s.spec.check_same(first.spec, str(s.path), str(first.path))
        except SpecError as e:
            raise StoreError(f"mixed control specs: {e}") from None
    return stores


def plan_sources(stores: list[Store], opts: BuildOptions, skip_damaged: bool
                 ) -> tuple[list[tuple[Store, list[Segment]]], list[str]]:
    """The output episodes of every source, checked against the options, and what was skipped
    for damage (with `skip_damaged`; otherwise damage is refused when it is read)."""
    fps = opts.fps if opts.fps is not None else stores[0].fps
    plans, skipped = [], []
    for s in stores:
        check_size(s, opts)
        factor = fps_factor(s.fps, opts.fps if opts.fps is not None else s.fps, str(s.path))
        if abs(s.fps / factor - fps) > 1e-3:
            raise StoreError(f"{s.path}: records at {s.fps:g} fps, {stores[0].path} at {stores[0].fps:g}; "
                             "pass --fps to bring them to one rate")
        bad_eps, lines = s.damaged_episodes() if skip_damaged else ([], [])
        skipped += [f"{s.path}: skipped the episode of frames {ep.start}-{ep.stop - 1}: {line}"
                    for ep, line in zip(bad_eps, lines)]
        bad = {ep.start for ep in bad_eps}
        plans.append((s, [seg for k, ep in enumerate(s.episodes()) if ep.start not in bad
                          for seg in plan_episode(s, ep.start, ep.stop, opts, factor, k)]))
    return plans, skipped


def write_segments(writer: StoreWriter, plans: list[tuple[Store, list[Segment]]], opts: BuildOptions,
                   bar: tqdm) -> None:
    """Read, transform and append every planned segment, one episode each."""
    for s, segs in plans:
        for seg in segs:
            first = int(seg.frames[0])
            times = s.read_time(first, int(seg.frames[-1]) + 1)
            writer.begin_episode()
            for a, b in read_blocks(seg.frames):
                sel = seg.frames[a:b]
                raw = s.read_frames(int(sel[0]), int(sel[-1]) + 1)[sel - sel[0]]
                for frame, action, i in zip(transform(raw, opts), seg.actions[a:b], sel):
                    writer.append(frame, action, float(times[i - first]))
                bar.update(len(sel))


def build(sources: list[str | Path], out: str | Path, opts: BuildOptions, *, overwrite: bool = False,
          progress: bool = True, skip_damaged: bool = False) -> dict:
    """Write a training store from `sources`; returns a summary (frames in and out, episodes,
    and the episodes skipped for damage when `skip_damaged`). The store is built beside `out`
    and moved into place only when complete; `out` may not be, contain or lie inside a source,
    nor replace anything but a store (dataset.outputs)."""
    if not sources:
        raise StoreError("no source stores given")
    opts.check()
    output = store_output(out, overwrite, sources)  # checked and locked before any work
    try:
        stores = open_sources(sources)
        plans, skipped = plan_sources(stores, opts, skip_damaged)
        total = sum(len(seg.frames) for _, segs in plans for seg in segs)
        if total == 0 and skipped and len(skipped) == sum(len(s.episodes()) for s in stores):
            raise StoreError(f"{out}: nothing to write: --skip-damaged left out every episode of the sources "
                             f"({len(skipped)}, each touching a damaged chunk); see `dreamcade data info --verify`")
        if total == 0:
            raise StoreError(f"{out}: nothing to write: every episode is shorter than two frames "
                             "after the lag, idle and frame-rate steps")
    except BaseException:
        output.abort()
        raise
    (w, h), fps = opts.size, opts.fps if opts.fps is not None else stores[0].fps
    src_meta = [{"path": str(s.path), "source": s.attrs.get("source"), "frames": len(s), "fps": s.fps}
                for s in stores]
    writer = StoreWriter(out, spec=stores[0].spec, fps=fps, frame_size=(w, h),
                         source={"kind": "build", "sources": src_meta, "options": _options_dict(opts)},
                         capture_size=tuple(stores[0].attrs.get("capture_size", (w, h))),
                         flush_seconds=30.0, atomic=True, output=output)
    bar = tqdm(total=total, unit="frame", desc="build", disable=not progress, dynamic_ncols=True)
    with bar, writer:  # on any error the partial store is removed and `out` is left as it was
        write_segments(writer, plans, opts, bar)
    return {"out": str(out), "frames_in": sum(len(s) for s in stores), "frames_out": total,
            "episodes_in": sum(len(s.episodes()) for s in stores),
            "episodes_out": sum(len(segs) for _, segs in plans), "fps": fps, "size": f"{w}x{h}",
            "skipped": skipped}


def read_blocks(frames: np.ndarray) -> list[tuple[int, int]]:
    """Split sorted source indices into [a, b) runs that each span fewer than BLOCK source frames."""
    out, a = [], 0
    for b in range(1, len(frames) + 1):
        if b == len(frames) or frames[b] - frames[a] >= BLOCK:
            out.append((a, b))
            a = b
    return out


def _options_dict(opts: BuildOptions) -> dict:
    d = asdict(opts)
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in d.items()}
