"""What an evaluation reads: held-out and training episodes of the evaluation stores, evenly
spaced samples of windows and frames, and the episodes that open-loop rollouts start from.

The split is the training run's own (dataset.windows.split_data, with the checkpoint's
`data.val_fraction` and `data.context`): whole episodes, or the last frames of a single one held
out by time. When the stores are the ones the model was trained on, "held-out" means never trained
on. Data with nothing held out falls back to all episodes, and says so; `held_out` says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dreamcade.dataset import ControlSpec, Store, open_store
from dreamcade.dataset.windows import NoEpisodesError, WindowDataset
from dreamcade.eval import EvalError


@dataclass
class EvalData:
    """The evaluation stores, split as training split them (dataset.windows.split_data: whole
    episodes, or the last frames of a single one, by time)."""

    stores: list[str]
    heldout: WindowDataset
    """Windows of L+1 steps over the held-out episodes or segments (or all, see `split`)."""
    heldout_pairs: WindowDataset
    """Windows of 2 steps (one transition) over the same held-out frames."""
    train: WindowDataset
    """Windows of 2 steps over the training frames (or all)."""
    split: str
    """"val" normally; "all" when the stores hold nothing held out."""
    held_out: str
    """What was held out, in words: "2 held-out episodes (of 7), 31% of the frames", "the last
    20% (80 frames, 320-399) of episode 0 of STORE, held out by time", or "nothing: every episode
    is used"."""
    notes: list[str] = field(default_factory=list)

    @property
    def spec(self) -> ControlSpec:
        return self.heldout.spec

    @property
    def fps(self) -> float:
        return self.heldout.fps

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        return tuple(self.heldout.frame_shape)

    @property
    def held_out_by(self) -> str | None:
        """"episode" or "time" (what the held-out parts are), None when nothing is held out."""
        return self.heldout.held_out_by if self.split == "val" else None


def _windows(stores: list[Store], context: int, split: str, val_fraction: float,
             spec: ControlSpec | None, skip_damaged: bool, gap: int) -> WindowDataset:
    return WindowDataset(stores, context=context, split=split, val_fraction=val_fraction, mode="stream",
                         expect_spec=spec, skip_damaged=skip_damaged, gap=gap)


def open_eval_data(paths: list[str], context: int, val_fraction: float,
                   spec: ControlSpec | None = None, heldout: bool = True,
                   skip_damaged: bool = False) -> EvalData:
    """Open `paths` (StoreError names a bad one). With `heldout=False` every episode serves as
    reference (sessions measured against the data, no model). With `skip_damaged`, episodes
    that touch a damaged chunk are left out and a note says which. `context` is the model's: it
    is the gap of a split by time, for the 2-step windows too, so they split as training did."""
    if not paths:
        raise EvalError("no data: pass --data STORE... (the checkpoint names no training stores)")
    stores = [open_store(p) for p in paths]
    split, notes = "val", []
    w = lambda ctx, sp: _windows(stores, ctx, sp, val_fraction, spec, skip_damaged, context)
    if heldout:
        try:
            held = w(context, "val")
        except NoEpisodesError as e:
            split = "all"
            notes.append(f"nothing held out in the data ({e}); every episode is used for both the "
                         "reference and the evaluation, so the figures are not on unseen data")
    else:
        split = "all"
    if split == "all":
        held = w(context, "all")
    pairs = w(1, split)
    train = w(1, "train" if split == "val" else "all")
    notes += list(dict.fromkeys(held.skipped + train.skipped))
    what = held.held_out() if split == "val" else "nothing: every episode is used"
    return EvalData([str(p) for p in paths], held, pairs, train, split, what, notes)


def sample_items(n_items: int, n: int) -> np.ndarray:
    """`n` (or all) item indices spread evenly over range(n_items), sorted (chunk-friendly)."""
    if n >= n_items:
        return np.arange(n_items)
    return np.unique(np.linspace(0, n_items - 1, n).round().astype(np.int64))


def sample_windows(ds: WindowDataset, n: int, batch: int = 256):
    """Yield Batches of at most `batch` windows, `n` windows spread evenly over `ds`."""
    items = sample_items(len(ds), n)
    for a in range(0, len(items), batch):
        yield ds.__getitems__(items[a:a + batch])


def sample_transitions(ds: WindowDataset, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`n` real transitions spread evenly over a 2-step WindowDataset: (before, after) uint8
    [N, H, W, 3] and the action held between them, float32 [N, A]."""
    if ds.context != 1:
        raise ValueError("sample_transitions needs a WindowDataset with context=1")
    parts = [(b.frames[:, 0], b.frames[:, 1], b.actions[:, 0]) for b in sample_windows(ds, n)]
    before, after, actions = (np.concatenate([p[i].numpy() for p in parts]) for i in range(3))
    return before.transpose(0, 2, 3, 1), after.transpose(0, 2, 3, 1), actions


def sample_frames(ds: WindowDataset, n: int) -> np.ndarray:
    """`n` frames spread evenly over the targets of `ds`, uint8 [N, H, W, 3]."""
    return np.concatenate([b.frames[:, -1].numpy() for b in sample_windows(ds, n)]).transpose(0, 2, 3, 1)


@dataclass
class RolloutCase:
    """One held-out episode (or segment, held out by time) to roll out from its start, with what
    happened in it."""

    path: str
    start: int
    stop: int
    context: np.ndarray
    """uint8 [L, H, W, 3]: the episode's first L frames."""
    context_actions: np.ndarray
    """float32 [L-1, A]: the actions between them."""
    actions: np.ndarray
    """float32 [T, A]: actions[t] is held after generated frame t-1 (after the context for t = 0)."""
    real: np.ndarray
    """uint8 [R, H, W, 3], R <= T: the recorded frames that the first R generated ones should match."""

    @property
    def reference_steps(self) -> int:
        return len(self.real)


def load_case(path: str | Path, start: int, stop: int, context: int, horizon: int) -> RolloutCase:
    """The rollout of episode [start, stop) of a store. Recorded actions drive the first
    stop - start - L steps (as far as ground truth goes); after that the episode's actions are
    replayed from its start again, so the model runs the whole horizon on plausible input."""
    s = open_store(path)
    L, n = context, stop - start
    actions = s.read_actions(start, stop)
    real = s.read_frames(start, min(stop, start + L + horizon))
    recorded = actions[L - 1:n - 1]  # held after frames start+L-1 .. stop-2
    loop = actions[:n - 1] if n > 1 else actions
    reps = -(-max(0, horizon - len(recorded)) // max(1, len(loop)))
    drive = np.concatenate([recorded, *([loop] * reps)])[:horizon]
    return RolloutCase(str(path), start, stop, real[:L], actions[:L - 1], drive, real[L:L + horizon])


def rollout_cases(data: EvalData, context: int, horizon: int, episodes: int) -> list[RolloutCase]:
    """The `episodes` longest held-out episodes (or segments, held out by time: each started from
    its own first frames) with at least one frame after the context (ties: in store order).
    Raises EvalError when none is long enough."""
    eps = [(p, a, b) for p, a, b in data.heldout.episodes if b - a > context]
    if not eps:
        raise EvalError(f"no held-out episode of {', '.join(data.stores)} has more than {context} frames "
                        f"(the model's context; held out: {data.held_out}); record longer episodes")
    order = sorted(range(len(eps)), key=lambda i: (-(eps[i][2] - eps[i][1]), i))[:episodes]
    return [load_case(*eps[i], context, horizon) for i in sorted(order)]


@dataclass
class SessionSequence:
    """One episode of a session store: frames to measure and the actions given."""

    path: str
    episode: int
    start: int
    frames: np.ndarray
    """uint8 [T, H, W, 3]."""
    actions: np.ndarray
    """float32 [T, A]: actions[t] is held from frame t to t+1."""
    spec: ControlSpec


def load_sessions(paths: list[str], horizon: int) -> list[SessionSequence]:
    """Every episode of each session store, cut to its first `horizon` frames."""
    out = []
    for path in paths:
        s = open_store(path)
        for k, e in enumerate(s.episodes()):
            stop = min(e.stop, e.start + horizon)
            out.append(SessionSequence(str(path), k, e.start, s.read_frames(e.start, stop),
                                       s.read_actions(e.start, stop), s.spec))
    if not out:
        raise EvalError(f"the session stores {', '.join(paths)} hold no frames")
    return out
