"""The user's mistakes, and how every command ends: one base class, one boundary.

A command's `main` runs its work through `boundary`, which turns a UserError into one
`error: ...` line and exit status 2, a full disk into one line and exit status 1, and Ctrl-C into
one line and exit status 130. Anything else is a bug and keeps its traceback. While the work
runs, `kill -USR1 PID` prints where every thread of the command is to its stderr, and the
command goes on (for a run that seems hung). `plural` gives the messages their counts
("1 episode", "3 episodes").
"""

from __future__ import annotations

import asyncio
import errno
import faulthandler
import signal
import sys
import warnings
from typing import Callable

DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class UserError(Exception):
    """A mistake the user can fix: the message names the file, option or key, and the fix."""


def plural(n: int, noun: str) -> str:
    """"1 episode", "2 episodes": a count and its noun, for messages."""
    return f"{n} {noun if n == 1 else noun + 's'}"


def boundary(work: Callable[[], int], interrupted: str = "interrupted") -> int:
    """Run a command's work; its exit status, with one line on stderr for what went wrong."""
    where_on_usr1()
    try:
        return work()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # a library's coroutine cut short by Ctrl-C is collected later with a warning: not news
        warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
        if not getattr(sys.unraisablehook, "quiets_half_built_loops", False):  # once a process
            sys.unraisablehook = _quiet_half_built_loops(sys.unraisablehook)
        _forget_unstarted_zarr_thread()
        _settle_zarr_reads()
        print(f"\n{interrupted}", file=sys.stderr)
        return 130
    except Exception as e:
        if not disk_full(e):
            raise
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        print(f"error: {where}no space left on the disk; free some space and run again (what was being "
              "written was removed, what was there before is as it was)", file=sys.stderr)
        return 1


def where_on_usr1() -> None:
    """SIGUSR1 prints every thread's stack to stderr and the process goes on; not where there is
    no SIGUSR1 (Windows) or stderr is no file (a test's captured stream)."""
    try:
        faulthandler.register(signal.SIGUSR1, file=sys.stderr.fileno(), all_threads=True)
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both of the last two
        pass


def _quiet_half_built_loops(hook):
    """After Ctrl-C: an event loop that Ctrl-C cut short while it was being made (zarr makes one
    for its I/O thread) fails in its __del__ when it is collected, after the command's last line
    ("Exception ignored in: BaseEventLoop.__del__ ... no attribute '_ssock'"). `hook` (the one in
    place) with that one left out: it is not news."""
    def quiet(unraisable) -> None:
        where = getattr(unraisable.object, "__qualname__", "")
        if where.endswith("EventLoop.__del__") and isinstance(unraisable.exc_value, AttributeError):
            return
        hook(unraisable)

    quiet.quiets_half_built_loops = True
    return quiet


def _forget_unstarted_zarr_thread() -> None:
    """Ctrl-C that falls between zarr creating its I/O thread and starting it leaves a thread its
    exit handler would join, which prints a traceback on the way out; there is nothing to join."""
    sync = sys.modules.get("zarr.core.sync")
    threads = getattr(sync, "iothread", None)
    if isinstance(threads, list) and threads and threads[0] is not None and threads[0].ident is None:
        threads[0] = None


def _settle_zarr_reads(timeout: float = 2.0) -> None:
    """Ctrl-C while zarr's I/O thread still runs a read leaves its tasks pending; at the exit they
    are destroyed ("Task was destroyed but it is pending!") or ask for the thread pool after it is
    shut down, and print after the command's last line. Cancel them and wait until they end."""
    sync = sys.modules.get("zarr.core.sync")
    loop = (getattr(sync, "loop", None) or [None])[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def cancel_the_rest() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    try:
        asyncio.run_coroutine_threadsafe(cancel_the_rest(), loop).result(timeout)
    except Exception:  # a loop that will not settle is left to zarr's own exit handler
        pass


def disk_full(e: BaseException) -> bool:
    """A write that failed for want of space: an OSError, or a library's error that wraps one
    (safetensors says "No space left on device (os error 28)")."""
    if isinstance(e, OSError):
        return e.errno in DISK_FULL
    return any(text in str(e) for text in ("No space left on device", "Disk quota exceeded", "File too large"))
