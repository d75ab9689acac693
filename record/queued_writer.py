"""A StoreWriter owned by one thread behind a bounded queue, so that capture never waits on
compression or disk.

The capture loop sends each frame with the action row of the interval that just ended (the
previous frame's action) and that interval's events; the writer thread holds a frame until its
action arrives, then appends it. `end_episode` closes the last frame of an episode with the
action of its final interval (up to the pause). When the queue holds `capacity` frames,
`full()` is true and the capture loop drops the next frame instead of waiting.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from dreamcade.dataset.store import StoreWriter
from dreamcade.record.inputs import Event


class QueuedWriter:
    """Runs `writer` in a thread; the thread alone touches it until close() returns."""

    def __init__(self, writer: StoreWriter, capacity: int) -> None:
        """capacity: frames the queue may hold (at 30 fps, 60 is two seconds)."""
        self.writer = writer
        self.capacity = max(1, capacity)
        self._q: queue.Queue = queue.Queue()  # bounded by full(); control messages always fit
        self._frames_queued = 0
        self._lock = threading.Lock()
        self.written = 0  # frames handed to the StoreWriter
        self.episodes = 0
        self.error: BaseException | None = None
        self._pending: tuple[np.ndarray, float] | None = None  # a frame waiting for its action
        self._thread = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self._thread.start()

    def full(self) -> bool:
        with self._lock:
            return self._frames_queued >= self.capacity

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def frame(self, frame: np.ndarray, t: float, prev_action: np.ndarray | None, events: list[Event]) -> None:
        """A frame [H, W, 3] uint8 captured at t (s); prev_action (None for an episode's first
        frame) is the action of the interval that ended at t, events that interval's events."""
        with self._lock:
            self._frames_queued += 1
        self._q.put(("frame", frame, t, prev_action, events))

    def end_episode(self, action: np.ndarray, events: list[Event]) -> None:
        """The episode ends: the action of its last frame's interval, and that interval's events."""
        self._q.put(("end", action, events))

    def drain(self) -> None:
        """Wait until everything sent so far is handed to the StoreWriter (or the thread died)."""
        while self.alive and self._q.unfinished_tasks:
            self._thread.join(timeout=0.01)

    def close(self, attrs: dict | None = None) -> None:
        """Write what is queued, set `attrs` on the store and close it. A failure is left in
        `error` (the store then holds what was flushed before it)."""
        self._q.put(("stop", attrs or {}))
        self._thread.join()

    def _run(self) -> None:
        try:
            while True:
                msg = self._q.get()
                try:
                    if not self._handle(msg):
                        return
                finally:
                    self._q.task_done()
        except BaseException as e:  # disk full, a bad frame: the capture loop stops and says so
            self.error = e

    def _handle(self, msg: tuple) -> bool:
        """Apply one message; False after the stop message."""
        if msg[0] == "frame":
            _, frame, t, action, events = msg
            with self._lock:
                self._frames_queued -= 1
            if self._pending is not None:
                self._append(action)
            self._events(events)
            self._pending = (frame, t)
        elif msg[0] == "end":
            if self._pending is not None:
                self._append(msg[1])
                self.episodes += 1
            self._events(msg[2])
            self.writer.begin_episode()
            self.writer.flush()
        else:
            if self._pending is not None:  # no end_episode came: nothing was held after it
                self._append(np.zeros(len(self.writer.spec), np.float32))
                self.episodes += 1
            self.writer.root.attrs.update(msg[1])
            self.writer.close()
            return False
        return True

    def _append(self, action: np.ndarray) -> None:
        frame, t = self._pending
        self.writer.append(frame, action, t)
        self._pending = None
        self.written += 1

    def _events(self, events: list[Event]) -> None:
        for t, control, value in events:
            self.writer.add_event(t, control, value)
