"""Training windows from stores: a torch Dataset of L+1-step windows and its DataLoader.

A window for target frame t holds frames t-L .. t and actions t-L .. t of one episode. Steps
before the episode start are padded by repeating its first frame (action zeroed, mask False),
so every frame but the first of an episode is a target. `split_data` decides, for training, eval,
play and export alike, which frames train and which validate: with several episodes, whole
episodes, by a hash of the store's identity and the episode's start; with one (a single screen
recording), its last frames, by time, L frames before them left unused (see `time_split`). Either
is the same in every process and every run for the same stores, fraction and context.

Two frame sources: "ram" loads the split's episodes once (uint8, channel-first) and gathers
windows with one fancy index per batch; "stream" reads chunk by chunk through a small cache,
and its sampler visits the windows chunk-block by chunk-block so each chunk is decoded about
once per epoch. "auto" picks ram when the frames fit in `ram_limit_bytes`.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from dreamcade.dataset.batch import Batch, collate
from dreamcade.dataset.controls import ControlSpec, SpecError
from dreamcade.dataset.errors import plural
from dreamcade.dataset.pixels import downscale
from dreamcade.dataset.store import Episode, Store, StoreError, open_store

SPLITS = ("train", "val", "all")


class NoEpisodesError(StoreError):
    """The split holds no episode (a store with one episode has no validation part)."""


class AllDamagedError(NoEpisodesError):
    """With skip_damaged, every episode of the split touches damage: none is left. Callers that
    fall back when a split is empty (no validation, eval on every episode) fall back here too,
    and say why."""

MODES = ("auto", "ram", "stream")


def default_ram_limit() -> int:
    """Half of the memory available now, at most 16 GiB."""
    try:
        avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        avail = 8 << 30
    return int(min(avail // 2, 16 << 30))


def episode_key(store: Store, start: int) -> float:
    """A stable number in [0, 1) for an episode: sha1 of the store's identity and the start."""
    ident = json.dumps([store.attrs.get("created"), store.attrs.get("source"), len(store), start],
                       sort_keys=True, default=str)
    return int(hashlib.sha1(ident.encode()).hexdigest()[:15], 16) / 16**15


def split_episodes(keys: list[float], val_fraction: float) -> np.ndarray:
    """Boolean [N], True for validation: the round(f * N) episodes with the smallest keys, at
    least one when f > 0 and N >= 2, never all of them."""
    n = len(keys)
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n_val = int(round(val_fraction * n))
    if val_fraction > 0 and n >= 2:
        n_val = min(max(n_val, 1), n - 1)
    is_val = np.zeros(n, bool)
    is_val[np.argsort(keys, kind="stable")[:n_val]] = True
    return is_val


def time_split(n: int, val_fraction: float, gap: int) -> tuple[int, int] | None:
    """One episode of `n` frames split by time: (n_train, first), frames [0, n_train) to train on,
    [n_train, first) unused (`gap` frames), [first, n) to validate on: the last round(f * n)
    frames, at least gap + 1 (and 2: one target). None when that leaves fewer than 2 frames to
    train on.

    With gap = L, the last training frame and the first validation frame are L + 1 frames apart:
    no window of L + 1 frames (L of context and the target) of the recording holds both."""
    n_val = max(int(round(val_fraction * n)), gap + 1, 2)
    n_train = n - n_val - gap
    return (n_train, n - n_val) if n_train >= 2 else None


@dataclass(frozen=True)
class Part:
    """Frames [start, stop) of store number `store` that windows are cut from, padded at `start`
    like an episode's start: a whole episode, or one side of an episode split by time. `episode`
    is that episode's number in its store, `whole` its frames."""

    store: int
    start: int
    stop: int
    episode: int
    whole: Episode

    def __len__(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Split:
    """Which parts train and which validate. `by`: "episode" (whole episodes held out), "time"
    (the last frames of the one episode held out) or None (nothing held out, `why` says why)."""

    train: list[Part]
    val: list[Part]
    every: list[Part]
    by: str | None
    why: str = ""


def split_data(stores: list[Store], val_fraction: float, gap: int) -> Split:
    """The one rule for what is held out (training, eval, play and export call it through
    WindowDataset): with two episodes or more (of two frames or more), whole episodes
    (split_episodes by episode_key); with one, its last frames by time (time_split, `gap` = the
    model's context). A function of the stores, the fraction and the gap, so every reader of a
    run's config gets the run's split."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    eps = [Part(k, e.start, e.stop, i, e) for k, s in enumerate(stores) for i, e in enumerate(s.episodes())
           if len(e) >= 2]
    if not eps:
        raise StoreError(f"{stores[0].path}: no episode has two frames or more")
    if val_fraction == 0:
        return Split(eps, [], eps, None, "val_fraction is 0")
    if len(eps) >= 2:
        is_val = split_episodes([episode_key(stores[p.store], p.start) for p in eps], val_fraction)
        return Split([p for p, v in zip(eps, is_val) if not v], [p for p, v in zip(eps, is_val) if v], eps, "episode")
    (p,) = eps
    cut = time_split(len(p), val_fraction, gap)
    if cut is None:
        need = next(n for n in itertools.count(len(p)) if time_split(n, val_fraction, gap))
        return Split(eps, [], eps, None, f"the stores hold 1 episode, of {len(p)} frames: too few to hold out its "
                     f"last frames by time (that takes {need} at {percent(val_fraction)}: at least "
                     f"{max(gap + 1, 2)} to validate on, a gap of {gap} and 2 to train on); record longer or more "
                     "episodes (pauses and resets start new ones) or use split='all'")
    n_train, first = cut
    return Split([replace(p, stop=p.start + n_train)], [replace(p, start=p.start + first)], eps, "time")


def percent(x: float) -> str:
    """A share as a percentage, never rounded to 0%."""
    pct = 100 * x
    return f"{pct:.0f}%" if pct >= 1 else f"{pct:.2g}%"


class _StreamFrames:
    """Frames read from the stores chunk by chunk, with an LRU cache of decoded chunks. Each
    process (DataLoader worker) opens the stores itself."""

    def __init__(self, paths: list[Path], cache_chunks: int) -> None:
        self.paths, self.cache_chunks = paths, cache_chunks
        self._pid, self._stores, self._cache = None, [], OrderedDict()

    def _open(self) -> None:
        if self._pid != os.getpid():
            self._stores = [open_store(p) for p in self.paths]
            self._cache.clear()
            self._pid = os.getpid()

    def chunk(self, store: int, chunk: int) -> np.ndarray:
        """Decoded chunk as uint8 [cf, 3, H, W]."""
        self._open()
        key = (store, chunk)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        s = self._stores[store]
        cf = s.frames.chunks[0]
        data = s.read_frames(chunk * cf, min(len(s), (chunk + 1) * cf)).transpose(0, 3, 1, 2)
        self._cache[key] = data
        if len(self._cache) > self.cache_chunks:
            self._cache.popitem(last=False)
        return data

    def __getstate__(self) -> dict:
        return {"paths": self.paths, "cache_chunks": self.cache_chunks}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["paths"], state["cache_chunks"])


class WindowDataset(Dataset):
    """Windows of `context` + 1 steps from any number of stores (see the module docstring)."""

    def __init__(self, stores: list[str | Path | Store], context: int, split: str = "train",
                 val_fraction: float = 0.1, mode: str = "auto", expect_spec: ControlSpec | None = None,
                 as_float: bool = False, ram_limit_bytes: int | None = None,
                 cache_chunks: int = 32, skip_damaged: bool = False, gap: int | None = None,
                 scale: int = 1) -> None:
        """scale: frames come out `scale` times smaller than stored (dataset.pixels.downscale: the
        area resize of `data build --size`), for the dynamics model of a two-stage world, whose
        upsampler trains on the stored size (model/upsampler.py). skip_damaged: leave out episodes that touch a missing or undecodable chunk (every chunk
        is decoded once to find them; `skipped` then says what was left out). Otherwise damage
        raises StoreError when it is read. gap: frames left unused before the validation part of
        an episode split by time (default: `context`); pass the model's context to read its split
        through windows of another length."""
        if context < 1:
            raise ValueError(f"context must be at least 1 frame, got {context}")
        self.gap = context if gap is None else gap
        if self.gap < 0:
            raise ValueError(f"gap must be 0 or more frames, got {gap}")
        if split not in SPLITS or mode not in MODES:
            raise ValueError(f"split must be one of {SPLITS} and mode one of {MODES}")
        opened = [s if isinstance(s, Store) else open_store(s) for s in stores]
        if not opened:
            raise StoreError("no stores given")
        self.stores, self.context, self.split, self.as_float = opened, context, split, as_float
        self.spec = self._common_spec(opened, expect_spec)
        self.stored_shape = opened[0].frame_shape
        for s in opened[1:]:
            if s.frame_shape != self.stored_shape:
                raise StoreError(f"{s.path}: frames are {s.width}x{s.height} but {opened[0].path} has "
                                 f"{opened[0].width}x{opened[0].height}; build both at one --size")
        h, w, c = self.stored_shape
        if scale < 1 or h % scale or w % scale:
            raise StoreError(f"{opened[0].path}: frames are {w}x{h}, not whole multiples of the upsampler's scale "
                             f"{scale}; build the store at a size that is (`dreamcade data build ... --size "
                             f"{max(1, w // scale) * scale}x{max(1, h // scale) * scale}`)")
        self.scale = scale
        self.frame_shape = (h // scale, w // scale, c)
        """(height, width, 3) of the frames it gives: the stored size over `scale`."""
        self.fps = opened[0].fps
        self.skipped: list[str] = []
        self._index_episodes(val_fraction, skip_damaged)
        nbytes = int(self.ep_len.sum()) * int(np.prod(self.frame_shape))
        if mode == "auto":
            mode = "ram" if nbytes <= (ram_limit_bytes or default_ram_limit()) else "stream"
        self.mode = mode
        self._actions = self._load_actions()
        if mode == "ram":
            self._frames = self._load_frames()
        else:
            self._stream = _StreamFrames([s.path for s in opened], cache_chunks)

    # -- indexing ------------------------------------------------------------------------------

    @staticmethod
    def _common_spec(stores: list[Store], expect: ControlSpec | None) -> ControlSpec:
        ref, ref_name = (expect, "the expected control spec") if expect else (stores[0].spec, str(stores[0].path))
        for s in stores:
            try:
                s.spec.check_same(ref, str(s.path), ref_name)
            except SpecError as e:
                raise StoreError(str(e)) from None
        return ref

    def _index_episodes(self, val_fraction: float, skip_damaged: bool) -> None:
        split = split_data(self.stores, val_fraction, self.gap)
        self.held_out_by, self.n_episodes = split.by, len(split.every)
        self.n_frames_every = sum(map(len, split.every))  # of every episode, held out or not
        eps = {"train": split.train, "val": split.val, "all": split.every}[self.split]
        if not eps:
            raise NoEpisodesError(f"no {self.split} episodes: {split.why}")
        if skip_damaged:  # after the split, so that the split of the other episodes is unchanged
            eps = self._drop_damaged(eps)
        self.parts = eps  # the episodes (or the parts of one, split by time) that windows are cut from
        self.ep_store = np.array([p.store for p in eps], np.int64)
        self.ep_local = np.array([p.start for p in eps], np.int64)
        self.ep_len = np.array([len(p) for p in eps], np.int64)
        self.ep_start = np.concatenate([[0], np.cumsum(self.ep_len)[:-1]]).astype(np.int64)
        # targets: every frame of an episode but its first, in compact (split) frame numbering
        self.targets = np.concatenate([np.arange(a + 1, a + n) for a, n in zip(self.ep_start, self.ep_len)])
        self.target_ep = np.repeat(np.arange(len(eps)), self.ep_len - 1)
        self.episodes = [(self.stores[p.store].path, p.start, p.stop) for p in eps]

    def held_out(self) -> str:
        """What a validation split holds out, in words: "2 held-out episodes (of 7)", or "the
        last 20% (80 frames, 320-399) of episode 0 of STORE, held out by time"."""
        if self.split != "val":
            raise ValueError(f"held_out() describes the validation split, not {self.split!r}")
        if self.held_out_by == "time":
            return "; ".join(f"the last {percent(len(p) / len(p.whole))} ({plural(len(p), 'frame')}, {p.start}-"
                             f"{p.stop - 1}) of episode {p.episode} of {self.stores[p.store].path}, held out by time"
                             for p in self.parts)
        share = sum(map(len, self.parts)) / self.n_frames_every
        return f"{plural(len(self.parts), 'held-out episode')} (of {self.n_episodes}), {percent(share)} of the frames"

    def _drop_damaged(self, eps: list[Part]) -> list[Part]:
        """The parts whose own rows touch no damage (one side of an episode split by time is kept
        when the damage lies in the other)."""
        kept = []
        for p in eps:
            line = self.stores[p.store].damage_between(p.start, p.stop)
            if line is None:
                kept.append(p)
                continue
            what = "episode" if p.whole == Episode(p.start, p.stop) else "part of an episode"
            self.skipped.append(f"{self.stores[p.store].path}: skipped the {self.split} {what} of frames "
                                f"{p.start}-{p.stop - 1}: {line}")
        if not kept:
            raise AllDamagedError(f"every {self.split} episode touches damaged data; first: {self.skipped[0]}")
        return kept

    def _load_actions(self) -> np.ndarray:
        return np.concatenate([self.stores[k].read_actions(a, a + n)
                               for k, a, n in zip(self.ep_store, self.ep_local, self.ep_len)])

    def _load_frames(self) -> np.ndarray:
        h, w, _ = self.frame_shape
        out = np.empty((int(self.ep_len.sum()), 3, h, w), np.uint8)
        for k, a, n, g in zip(self.ep_store, self.ep_local, self.ep_len, self.ep_start):
            s = self.stores[k]
            for b in range(0, n, 4096):
                m = min(4096, n - b)
                block = torch.from_numpy(s.read_frames(a + b, a + b + m).transpose(0, 3, 1, 2))
                out[g + b:g + b + m] = downscale(block, self.scale).numpy()
        return out

    def __len__(self) -> int:
        return len(self.targets)

    @property
    def nbytes(self) -> int:
        """Bytes held in RAM by the frames and actions."""
        frames = self._frames.nbytes if self.mode == "ram" else 0
        return frames + self._actions.nbytes

    def window_index(self, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Compact frame indices [B, L+1] of windows `items` and their mask (False = padded)."""
        targets = self.targets[items]
        starts = self.ep_start[self.target_ep[items]]
        idx = targets[:, None] + np.arange(-self.context, 1)[None, :]  # [B, L+1]
        mask = idx >= starts[:, None]
        return np.maximum(idx, starts[:, None]), mask

    def locate(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Compact frame indices -> (store number, frame index inside that store)."""
        ep = np.searchsorted(self.ep_start, idx, side="right") - 1
        return self.ep_store[ep], self.ep_local[ep] + (idx - self.ep_start[ep])

    def target_chunks(self) -> np.ndarray:
        """An id of the store chunk each window's target frame lies in (for chunk-aware sampling)."""
        store, local = self.locate(self.targets)
        cf = np.array([s.frames.chunks[0] for s in self.stores])
        return store * (1 << 40) + local // cf[store]

    # -- reading -------------------------------------------------------------------------------

    def _gather(self, idx: np.ndarray) -> np.ndarray:
        """uint8 [B, L+1, 3, H, W] for compact frame indices [B, L+1]."""
        if self.mode == "ram":
            return self._frames[idx]
        flat = idx.reshape(-1)
        uniq, inverse = np.unique(flat, return_inverse=True)
        store, local = self.locate(uniq)
        h, w, _ = self.stored_shape
        out = np.empty((len(uniq), 3, h, w), np.uint8)
        cf = np.array([s.frames.chunks[0] for s in self.stores])[store]
        chunk = local // cf
        for key in np.unique(np.stack([store, chunk], 1), axis=0):
            sel = (store == key[0]) & (chunk == key[1])
            out[sel] = self._stream.chunk(int(key[0]), int(key[1]))[local[sel] - key[1] * cf[sel]]
        out = downscale(torch.from_numpy(out), self.scale).numpy()
        return out[inverse].reshape(*idx.shape, *out.shape[1:])

    def episode_steps(self, episode: int, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The first `n` (default all) frames of episode `episode` of this split, uint8
        [n, H, W, 3], and the actions held after each, float32 [n, A]."""
        n = int(self.ep_len[episode]) if n is None else min(n, int(self.ep_len[episode]))
        idx = self.ep_start[episode] + np.arange(n)
        return self._gather(idx[None])[0].transpose(0, 2, 3, 1), self._actions[idx]

    def __getitems__(self, items) -> Batch:
        items = np.asarray(items, np.int64)
        idx, mask = self.window_index(items)
        frames = torch.from_numpy(self._gather(idx))
        actions = torch.from_numpy(self._actions[idx] * mask[..., None])
        batch = Batch(frames, actions, torch.from_numpy(mask))
        if self.as_float:
            batch.frames = batch.frames_float()
        return batch

    def __getitem__(self, i: int) -> Batch:
        if not -len(self) <= i < len(self):
            raise IndexError(f"window {i} out of range ({len(self)} windows)")
        b = self.__getitems__([i % len(self)])
        return Batch(b.frames[0], b.actions[0], b.mask[0])

    def weights(self, by: str = "window") -> np.ndarray:
        """Sampling weight of each window: "window" = uniform over windows (an episode is drawn in
        proportion to its length); "episode" = every episode equally often."""
        if by == "window":
            return np.ones(len(self))
        if by == "episode":
            return 1.0 / (self.ep_len[self.target_ep] - 1)
        raise ValueError(f"weighting must be 'window' or 'episode', got {by!r}")


class ChunkBlockSampler(Sampler[int]):
    """A shuffle that reads well from disk: chunks in random order, taken `block` chunks at a
    time, the windows of each block shuffled together. `epoch` picks the order."""

    def __init__(self, dataset: WindowDataset, block: int = 8, seed: int = 0, epoch: int = 0) -> None:
        self.block, self.seed, self.epoch = block, seed, epoch
        chunks = dataset.target_chunks()
        order = np.argsort(chunks, kind="stable")
        bounds = np.flatnonzero(np.diff(chunks[order])) + 1
        self.groups = np.split(order, bounds)

    def __len__(self) -> int:
        return sum(len(g) for g in self.groups)

    def __iter__(self):
        rng = np.random.default_rng((self.seed, self.epoch, 1))
        perm = rng.permutation(len(self.groups))
        for a in range(0, len(perm), self.block):
            items = np.concatenate([self.groups[i] for i in perm[a:a + self.block]])
            yield from rng.permutation(items).tolist()


def epoch_order(dataset: WindowDataset, *, shuffle: bool, seed: int, epoch: int,
                weighting: str = "window") -> np.ndarray:
    """The window order of one epoch: a pure function of (seed, epoch), so a resumed run can
    skip to where it stopped. Streamed data is shuffled chunk-block by chunk-block; "episode"
    weighting draws len(dataset) windows with replacement so every episode is equally likely."""
    weights = dataset.weights(weighting)
    if not shuffle:
        return np.arange(len(dataset))
    rng = np.random.default_rng((seed, epoch, 0))
    if weighting == "episode":
        return rng.choice(len(dataset), size=len(dataset), replace=True, p=weights / weights.sum())
    if dataset.mode == "stream":
        return np.fromiter(ChunkBlockSampler(dataset, seed=seed, epoch=epoch), np.int64, len(dataset))
    return rng.permutation(len(dataset))


def _seed_worker(worker_id: int) -> None:
    np.random.seed(torch.initial_seed() % 2**32)


def make_loader(dataset: WindowDataset, batch_size: int, *, shuffle: bool = True, num_workers: int = 0,
                seed: int = 0, epoch: int = 0, skip_batches: int = 0, pin_memory: bool | None = None,
                drop_last: bool = True, weighting: str = "window", rank: int = 0, world: int = 1) -> DataLoader:
    """A DataLoader of Batches over one epoch (see `epoch_order`), from batch `skip_batches` on;
    seeded, the same batches with any number of workers, pinned memory by default on CUDA.

    With `world` processes, every process computes the same order (the same seed) and step k
    takes its global batch of world x batch_size windows from it; process `rank` gets its
    rank-th slice, so no two processes see the same window in a step, or in an epoch."""
    order = epoch_order(dataset, shuffle=shuffle, seed=seed, epoch=epoch, weighting=weighting)
    span = batch_size * world
    n = len(order) // span * span if drop_last else len(order)
    batches = [order[a + rank * batch_size:min(n, a + (rank + 1) * batch_size)].tolist()
               for a in range(0, n, span)][skip_batches:]
    batches = [b for b in batches if b]
    return DataLoader(dataset, batch_sampler=batches, collate_fn=collate, num_workers=num_workers,
                      pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
                      worker_init_fn=_seed_worker, generator=torch.Generator().manual_seed(seed),
                      persistent_workers=False)
