"""A played session (dreamcade play) as a store, which `dreamcade data info` reads and eval scores like any
recording: each episode the real context the model started from, then the generated frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dreamcade.dataset import StoreWriter
from dreamcade.dataset.build import idle_row
from dreamcade.dataset.outputs import Output


class Session:
    """A played session as a store: each episode begins with the context the model started from
    (`source.context` frames), then every generated frame with the input held on it."""

    def __init__(self, path: Path, spec, fps: float, frame_size: tuple[int, int], source: dict,
                 output: Output | None = None) -> None:
        """`output`: the session's store_output, opened (checked, locked) before play started."""
        self.path, self.spec = path, spec
        self.writer = StoreWriter(path, spec=spec, fps=fps, frame_size=frame_size, source=source,
                                  events=not spec.exclusive, output=output)
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
