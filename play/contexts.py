"""The real context windows a played session starts from (play.py's context picker), taken
from store episodes: those of --data, or the validation episodes of the checkpoint's own data."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dreamcade.dataset import StoreError, open_store
from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.store import store_exists

PLAY_HINT = "start from another episode (--episode N) or from another store (--data STORE)"


class Contexts:
    """Real context windows (L frames and the L-1 actions between them) from store episodes."""

    def __init__(self, episodes: list[tuple[str | Path, int, int]], context: int, seed: int | None) -> None:
        self.episodes, self.L = episodes, context
        self.stores = {p: open_store(p) for p in dict.fromkeys(p for p, _, _ in episodes)}
        for store in self.stores.values():
            store.damage_hint = PLAY_HINT
        self.rng = np.random.default_rng(seed)
        self.first = self.stores[episodes[0][0]]

    @classmethod
    def load(cls, data: str | None, spec: ControlSpec, context: int, train_stores: list[str],
             val_fraction: float, seed: int | None) -> Contexts:
        """Every episode of `data` when given, else the validation episodes of a checkpoint's
        training stores (split as training split them; all episodes when none is held out)."""
        from dreamcade.dataset.windows import NoEpisodesError, WindowDataset

        if data is not None:
            s = open_store(data, expect_spec=spec)
            eps = [(s.path, e.start, e.stop) for e in s.episodes()]
            if not eps:
                raise StoreError(f"{data}: the store holds no frames to start from")
            return cls(eps, context, seed)
        missing = [p for p in train_stores if not store_exists(p)]
        if not train_stores or missing:
            raise StoreError(f"the checkpoint's training data ({', '.join(missing or ['none recorded'])}) is not "
                             "here to take the first frames from; pass --data STORE (a store with its control spec)")
        kw = dict(context=context, val_fraction=val_fraction, mode="stream", expect_spec=spec)
        try:
            ds = WindowDataset(train_stores, split="val", **kw)
        except NoEpisodesError:  # one episode: nothing was held out, start from it
            ds = WindowDataset(train_stores, split="all", **kw)
        return cls(list(ds.episodes), context, seed)

    def pick(self, episode: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
        """A window at a random place of `episode` (random when None): frames uint8 [L, H, W, 3],
        actions [L-1, A], mask [L] (False for frames padded by repetition), and where it is from."""
        k = int(self.rng.integers(len(self.episodes))) if episode is None else episode
        path, a, b = self.episodes[k]
        start = int(self.rng.integers(a, max(a, b - self.L) + 1))
        n = min(self.L, b - start)
        s = self.stores[path]
        frames, actions = s.read_frames(start, start + n), s.read_actions(start, start + n)
        pad = self.L - n  # an episode shorter than the context: repeat its first frame, as training does
        frames = np.concatenate([np.repeat(frames[:1], pad, 0), frames])
        actions = np.concatenate([np.zeros((pad, actions.shape[1]), np.float32), actions])
        mask = np.arange(self.L) >= pad
        return frames, actions[:-1], mask, {"store": str(path), "frame": start, "episode": k}

    def sample_frames(self, runs: int = 64, length: int = 30) -> list[np.ndarray]:
        """Real frames from across every episode, for the HUD's health band: up to `runs` runs of
        `length` consecutive frames (uint8 [n, H, W, 3] each, n = `length` unless an episode is
        shorter) centred on evenly spaced places of the episodes laid end to end. Not the first
        frames: a death fade or a title screen there would be all the band knew of the game."""
        sizes = np.array([b - a for _, a, b in self.episodes])
        ends = np.cumsum(sizes)
        n = max(1, min(runs, int(ends[-1]) // length))
        out = []
        for k in range(n):
            t = int((k + 0.5) * ends[-1] / n)  # a place on the episodes laid end to end
            e = int(np.searchsorted(ends, t, side="right"))
            path, a, b = self.episodes[e]
            start = max(a, min(a + t - int(ends[e] - sizes[e]) - length // 2, b - length))
            out.append(self.stores[path].read_frames(start, min(b, start + length)))
        return out
