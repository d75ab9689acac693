"""Outputs that appear whole or not at all, and never destroy an input.

Every command that writes a folder (a training store, a replaced recording, a report) builds it
in a hidden sibling, `.<name>.partial-<pid>`, and moves it into place only when it is complete.
Replacing an old output swaps the two folders in one step where the kernel can (Linux
renameat2 RENAME_EXCHANGE), so a process killed at any moment leaves either the old output or
the complete new one at the target, plus at most a hidden partial folder that the next run of
any command writing that target removes.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
from pathlib import Path

PARTIAL = ".partial-"
_RENAME_EXCHANGE = 2


class OutputError(Exception):
    """An output that cannot be written where asked; the message names the path and the fix."""


def partial_path(target: Path) -> Path:
    """The hidden sibling that this process builds `target` in."""
    return target.with_name(f".{target.name}{PARTIAL}{os.getpid()}")


def remove_stale_partials(target: Path) -> None:
    """Remove partial siblings of `target` left by processes that no longer run."""
    if not target.parent.is_dir():
        return
    for p in target.parent.glob(f".{target.name}{PARTIAL}*"):
        pid = p.name.rsplit(PARTIAL, 1)[1]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            shutil.rmtree(p, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_partial(target: Path) -> Path:
    """A fresh, empty partial folder beside `target`; OutputError when the folder is not writable."""
    target = Path(target)
    tmp = partial_path(target)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_partials(target)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    except OSError as e:
        raise OutputError(f"{target}: cannot write there ({e.strerror or e}); choose another output "
                          "folder") from None
    return tmp


def move_into_place(tmp: Path, target: Path) -> Path:
    """Put the complete folder `tmp` at `target`, replacing an old one: first the swap, then the
    old folder (now at `tmp`) is removed."""
    _fsync(tmp)
    if not target.exists():
        os.rename(tmp, target)
    elif _exchange(tmp, target):
        shutil.rmtree(tmp)
    else:  # no atomic exchange here: the old folder is set aside, never removed first
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        os.rename(target, old)
        os.rename(tmp, target)
        shutil.rmtree(old)
    _fsync(target.parent)
    return target


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2); False where that is not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    rc = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_apart(out: str | Path, inputs: list[str | Path], option: str = "--out") -> None:
    """Refuse an output that is, contains or lies inside one of the inputs."""
    o = Path(out).resolve()
    for inp in inputs:
        i = Path(inp).resolve()
        if o == i:
            raise OutputError(f"{option} {out}: is the input {inp}; writing it would destroy the input. "
                              f"Choose another {option}")
        if i in o.parents:
            raise OutputError(f"{option} {out}: lies inside the input {inp}; choose a {option} outside it")
        if o in i.parents:
            raise OutputError(f"{option} {out}: contains the input {inp}; replacing it would destroy the "
                              f"input. Choose another {option}")
