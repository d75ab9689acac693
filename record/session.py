"""A played session (play.py): the real context windows it starts from, taken from store
episodes, and the store it is saved to, which `dataset info` reads and eval scores like any
recording."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dataset import StoreError, StoreWriter, open_store
from dataset.build import idle_row
from dataset.controls import ControlSpec


class Contexts:
    """Real context windows (L frames and the L-1 actions between them) from store episodes."""

    def __init__(self, episodes: list[tuple[Path, int, int]], context: int, seed: int | None) -> None:
        self.episodes, self.L = episodes, context
        self.stores = {p: open_store(p) for p in dict.fromkeys(p for p, _, _ in episodes)}
        self.rng = np.random.default_rng(seed)
        self.first = self.stores[episodes[0][0]]

    @classmethod
    def load(cls, data: str | None, spec: ControlSpec, context: int, train_stores: list[str],
             val_fraction: float, seed: int | None) -> Contexts:
        """Every episode of `data` when given, else the validation episodes of a checkpoint's
        training stores (split as training split them; all episodes when none is held out)."""
        from dataset.windows import NoEpisodesError, WindowDataset

        if data is not None:
            s = open_store(data, expect_spec=spec)
            eps = [(s.path, e.start, e.stop) for e in s.episodes()]
            if not eps:
                raise StoreError(f"{data}: the store holds no frames to start from")
            return cls(eps, context, seed)
        missing = [p for p in train_stores if not Path(p).exists()]
        if not train_stores or missing:
            raise StoreError(f"the checkpoint's training data ({', '.join(missing or ['none recorded'])}) is not "
                             "here to take the first frames from; pass --data STORE (a store with its control spec)")
        kw = dict(context=context, val_fraction=val_fraction, mode="stream", expect_spec=spec)
        try:
            ds = WindowDataset(train_stores, split="val", **kw)
        except NoEpisodesError:  # one episode: nothing was held out, start from it
            ds = WindowDataset(train_stores, split="all", **kw)
        return cls([(Path(p), a, b) for p, a, b in ds.episodes], context, seed)

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

    def sample_frames(self, n: int = 256) -> np.ndarray:
        """Up to n real frames (the start of the first episode), uint8 [n, H, W, 3]."""
        path, a, b = self.episodes[0]
        return self.stores[path].read_frames(a, min(b, a + n))


class Session:
    """A played session as a store: each episode begins with the context the model started from
    (`source.context` frames), then every generated frame with the input held on it."""

    def __init__(self, path: Path, spec, fps: float, frame_size: tuple[int, int], source: dict) -> None:
        self.path, self.spec = path, spec
        self.writer = StoreWriter(path, spec=spec, fps=fps, frame_size=frame_size, source=source,
                                  events=not spec.exclusive)
        self.pending: tuple[np.ndarray, float] | None = None
        self.last_t = -np.inf

    def _append(self, frame: np.ndarray, action: np.ndarray, t: float) -> None:
        """Append with a time after every earlier one (a context shown at a reset is dated
        before it, which must not reach back past the previous episode)."""
        self.last_t = max(t, self.last_t + 1e-6)
        self.writer.append(frame, action, self.last_t)

    def begin(self, frames: np.ndarray, actions: np.ndarray, t: float) -> None:
        """Start an episode from context frames [L, H, W, 3] and the actions between them [L-1, A]."""
        if self.pending is not None:
            self.end_episode()
        self.writer.begin_episode()
        n = len(frames)
        for i in range(n - 1):  # times one frame apart, the newest at t
            self._append(frames[i], actions[i], t - (n - 1 - i) / self.writer.fps)
        self.pending = (frames[-1], t)

    def add(self, action: np.ndarray, events: list, frame: np.ndarray, t: float) -> None:
        """`action` was held on the newest frame and made `frame` (shown at time t, seconds)."""
        self._append(self.pending[0], action, self.pending[1])
        for e in events:
            self.writer.add_event(*e)
        self.pending = (frame, t)

    def end_episode(self) -> None:
        self._append(self.pending[0], idle_row(self.spec), self.pending[1])  # nothing ran after it
        self.pending = None

    def close(self) -> int:
        if self.pending is not None:
            self.end_episode()
        self.writer.close()
        return self.writer.n_frames
