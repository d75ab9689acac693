"""The recorder's messages and its live status line, and the size of a store on disk."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path


def folder_bytes(path: Path) -> int:
    """Bytes of the files under `path` (files renamed away while we look are skipped)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


class DiskUsage:
    """A folder's size, walked again no more often than once a second, nor than 20 times the
    last walk took (so a store of many chunks costs the recorder at most 5% of a core)."""

    def __init__(self, path: str | Path) -> None:
        self.path, self.bytes, self._next = Path(path), 0, 0.0

    def mb(self) -> float:
        """Megabytes (10^6 bytes) on disk."""
        now = time.monotonic()
        if now >= self._next:
            self.bytes = folder_bytes(self.path)
            self._next = now + max(1.0, 20 * (time.monotonic() - now))
        return self.bytes / 1e6


class Status:
    """Messages, and a status line on stderr: rewritten in place on a terminal, one line per
    update otherwise (a log, or a test reading it)."""

    def __init__(self, stream=None, quiet: bool = False) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._lock = threading.Lock()
        self._shown = False  # a status line is on screen without its newline

    def message(self, text: str) -> None:
        with self._lock:
            self.stream.write(("\r\033[K" if self._shown else "") + text + "\n")
            self.stream.flush()
            self._shown = False

    def line(self, text: str) -> None:
        if self.quiet:
            return
        with self._lock:
            self.stream.write(f"\r\033[K{text}" if self.tty else text + "\n")
            self.stream.flush()
            self._shown = self.tty
