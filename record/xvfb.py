"""A virtual X server (Debian's `xvfb`) on a free display: for the tests, the recorder benchmark,
and for recording a game on a machine without a screen."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import tempfile
import time


def stop_process(proc: subprocess.Popen, timeout: float = 5.0) -> None:
    """SIGTERM, then SIGKILL if it is still there after `timeout` seconds; waits for the end."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Xvfb:
    """`Xvfb -displayfd`: the server picks a free display number and tells us when it is ready.

    Use as a context manager, or call stop(). `display` is the DISPLAY value (":N")."""

    def __init__(self, width: int = 1280, height: int = 800, depth: int = 24, timeout: float = 10.0) -> None:
        exe = shutil.which("Xvfb")
        if exe is None:
            raise FileNotFoundError("Xvfb is not installed (Debian/Ubuntu: apt-get install xvfb)")
        read_fd, write_fd = os.pipe()
        self._log = tempfile.TemporaryFile()  # not a pipe: a chatty server must never block on it
        self.proc = subprocess.Popen(
            [exe, "-displayfd", str(write_fd), "-screen", "0", f"{width}x{height}x{depth}",
             "-nolisten", "tcp", "-noreset"],
            pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=self._log)
        os.close(write_fd)
        try:
            self.display = ":" + self._read_number(read_fd, timeout)
        except Exception:
            self.stop()
            raise
        finally:
            os.close(read_fd)

    def _read_number(self, fd: int, timeout: float) -> str:
        text, deadline = b"", time.monotonic() + timeout
        while not text.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"Xvfb did not start within {timeout} s")
            chunk = os.read(fd, 64)
            if not chunk:
                self.proc.wait(timeout=5)
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")[-500:]
                raise RuntimeError(f"Xvfb exited before it was ready: {err}")
            text += chunk
        return text.decode().strip()

    def env(self) -> dict[str, str]:
        """os.environ with DISPLAY pointing at this server."""
        return {**os.environ, "DISPLAY": self.display}

    def stop(self) -> None:
        stop_process(self.proc)
        self._log.close()

    def __enter__(self) -> Xvfb:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
