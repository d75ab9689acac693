"""One home for every output a command writes: stores, runs, worlds, reports, clips, sessions.

An `Output` is opened before any work starts and
(a) resolves the target and every input to real local paths (a `file://` URL is its local path;
    writing to any other URL is refused: writing is local only);
(b) refuses an existing target without --overwrite (an empty folder is free), one that is not of
    its kind even with --overwrite, and a target that is, contains or lies inside an input;
(c) holds a lock on the target for the whole write (`.<name>.lock` beside it, flock): a second
    writer of the same target is refused with the holder's pid;
(d) builds a new output beside the target, `.<name>.partial-<pid>`, and puts it in place only when
    it is complete, checking the target again at that moment: one that appeared meanwhile, or was
    swapped for something else, is left as it is and the write is refused (Linux renameat2 makes
    the check and the move one step: RENAME_NOREPLACE for a new target, RENAME_EXCHANGE then a
    look at what came out for a replaced one);
(e) removes only what it made: its partial, its lock, the parent folders it created, and, after a
    complete swap, the old output it was allowed to replace (a partial once the chunk writes still
    under way in zarr's I/O thread have ended).

A process killed at any moment leaves either the old output or the complete new one at the
target, plus at most a hidden partial that the next writer of that target removes.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

from dreamcade.dataset.errors import UserError

PARTIAL = ".partial-"
_NOREPLACE, _EXCHANGE = 1, 2


class OutputError(UserError):
    """An output that cannot be written where asked; the message names the path and the fix."""


# -- paths ----------------------------------------------------------------------------------------------

def is_url(path: str | Path) -> bool:
    """Whether a path is a URL (`scheme://...`) rather than a local path."""
    return isinstance(path, str) and "://" in path


def local(path: str | Path, option: str = "--out") -> Path | None:
    """A path or `file://` URL as a real, absolute local path (symlinks followed); None for a URL
    of another scheme. OutputError for a symlink loop."""
    if is_url(path):
        url = urlparse(path)
        if url.scheme != "file":
            return None
        path = unquote(url.path)
    try:
        return Path(path).expanduser().resolve()
    except (RuntimeError, OSError) as e:  # RuntimeError: a symlink loop
        raise OutputError(f"{option} {path}: cannot be followed ({e}); remove the symlink loop or "
                          "name the real folder") from None


def check_apart(out: str | Path, inputs: list[str | Path], option: str = "--out",
                around: list[str | Path] = ()) -> None:
    """Refuse an output that is, contains or lies inside one of `inputs`, or that is or contains
    one of `around` (inputs an output may lie inside, e.g. the run a world is written into)."""
    o = local(out, option)
    if o is None:
        return
    for inp, inside_ok in [(i, False) for i in inputs] + [(i, True) for i in around]:
        i = local(inp, "input")
        if i is None:
            continue
        if o == i:
            raise OutputError(f"{option} {out}: is the input {inp}; writing it would destroy the input. "
                              f"Choose another {option}")
        if i in o.parents and not inside_ok:
            raise OutputError(f"{option} {out}: lies inside the input {inp}; choose a {option} outside it")
        if o in i.parents:
            raise OutputError(f"{option} {out}: contains the input {inp}; replacing it would destroy the "
                              f"input. Choose another {option}")


def article(noun: str) -> str:
    """"a store", "an eval report"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def partial_path(target: Path, file: bool = False) -> Path:
    """The hidden sibling that this process builds `target` in (a file keeps its suffix, which
    tells writers such as imageio the format)."""
    return target.with_name(f".{target.name}{PARTIAL}{os.getpid()}{target.suffix if file else ''}")


def remove_stale_partials(target: Path) -> None:
    """Remove partial siblings of `target` left by processes that no longer run."""
    if not target.parent.is_dir():
        return
    for p in target.parent.glob(f".{glob_escape(target.name)}{PARTIAL}*"):
        pid = p.name.rsplit(PARTIAL, 1)[1].split(".")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            _remove(p)


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def _identity(p: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def is_empty_folder(p: Path) -> bool:
    return p.is_dir() and not p.is_symlink() and not any(p.iterdir())


# -- the lock -------------------------------------------------------------------------------------------

class Lock:
    """An exclusive flock on `.<name>.lock` beside a target, held while a command writes it."""

    def __init__(self, target: Path, shown: str, option: str) -> None:
        self.path = target.with_name(f".{target.name}.lock")
        self.fd: int | None = None
        try:
            import fcntl
        except ImportError:  # no flock on this system: nothing to hold
            return
        while True:  # the holder removes the file when it lets go: lock the file that is there
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise OutputError(f"{option} {shown}: cannot write there ({e.strerror or e}); choose another "
                                  f"{option}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise OutputError(f"{option} {shown}: another process (pid {holder}) is writing it now; wait "
                                  f"for it to finish or choose another {option}") from None
            if _identity(self.path) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino):
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)
            self.fd = None


# -- the output -----------------------------------------------------------------------------------------

class Output:
    """One output of a command, from its checks to its swap into place (see the module).

    what: what the command writes, for messages ("store", "report", "world folder", "clip", "run").
    replaces: whether an existing thing at the target is one of these (--overwrite may replace
      only that; default: nothing may be replaced).
    in_place: "never" (built beside, the default), "when_new" (a recording: written at the target
      itself when nothing is there, so a killed recorder leaves what it flushed; beside when it
      replaces), or "always" (a run folder, which writes its own files crash-safely: locked only).
    file: the output is one file (a clip) rather than a folder.
    can_overwrite: the command has --overwrite (its refusals say so).

    Use as a context manager: the target is checked and locked on entering, `path` is where to
    write, and leaving without an error puts the output in place (leaving on an error removes
    what was made). Every check is made on entering, before any work starts.
    """

    def __init__(self, target: str | Path, *, what: str, inputs: list[str | Path] = (), around: list[str | Path] = (),
                 overwrite: bool = False, option: str = "--out", replaces: Callable[[Path], bool] | None = None,
                 in_place: str = "never", file: bool = False, can_overwrite: bool = True) -> None:
        self.shown, self.what, self.option = str(target), what, option
        self.overwrite, self.replaces, self.file, self.can_overwrite = overwrite, replaces, file, can_overwrite
        resolved = local(target, option)
        if resolved is None:
            raise OutputError(f"{option} {target}: writing to a URL is not supported (reading is); write a "
                              f"local {what} and copy it there")
        self.target = resolved
        check_apart(self.target, list(inputs), option, list(around))
        self.in_place = in_place
        self.lock: Lock | None = None
        self.path: Path = self.target
        self._made: list[Path] = []  # parent folders this output created
        self._old: tuple[int, int] | None = None  # the identity of what is replaced (or the empty folder)
        self._was_empty = False
        self._opened = False
        self._done = False

    # -- opening ------------------------------------------------------------------------------

    def __enter__(self) -> Output:
        """Check and lock the target and make the partial; entering an open output again (a
        `with` around one that a helper opened) does nothing."""
        if self._opened:
            return self
        self._opened = True
        try:
            self._make_parents()
            self.lock = Lock(self.target, self.shown, self.option)
            self._check_target()
            self._start()
        except BaseException:
            self._cleanup()
            raise
        return self

    def _refuse(self, why: str) -> OutputError:
        return OutputError(f"{self.option} {self.shown}: {why}")

    def _make_parents(self) -> None:
        missing = []
        p = self.target.parent
        while not p.exists():
            missing.append(p)
            p = p.parent
        try:
            for d in reversed(missing):
                d.mkdir()
                self._made.append(d)
        except OSError as e:
            raise self._refuse(f"cannot write there ({e.strerror or e}); choose another {self.option}") from None
        if not self.target.parent.is_dir():
            raise self._refuse(f"cannot write there ({self.target.parent} is a file, not a folder); choose "
                               f"another {self.option}")

    def _check_target(self) -> None:
        t = self.target
        if not os.path.lexists(t):
            return
        if self.in_place == "always":  # a run: written into, if it is one (its command decides on resuming)
            if not t.is_dir() or (self.replaces is not None and not self.replaces(t)):
                raise self._refuse(f"exists and is not {article(self.what)}; choose another {self.option}")
            return
        if not self.file and is_empty_folder(t):
            self._old, self._was_empty = _identity(t), True
            return
        if not self.overwrite:
            raise self._refuse(f"already exists; choose another {self.option}"
                               + (" or pass --overwrite" if self.can_overwrite else ""))
        if self.file and not t.is_file():
            raise self._refuse(f"exists and is {'a folder' if t.is_dir() else 'not a file'}, not {article(self.what)}; "
                               "refusing to replace it")
        if self.replaces is None or not self.replaces(t):
            raise self._refuse(f"exists and is not {article(self.what)}; refusing to replace it (choose another "
                               f"{self.option})")
        self._old = _identity(t)

    def _start(self) -> None:
        try:
            remove_stale_partials(self.target)
            if self.in_place == "always":
                if not self.target.exists():
                    self.target.mkdir()
                    self._made.append(self.target)  # removed again only while empty
                self.path = self.target
            elif self.in_place == "when_new" and self._old is None:
                self.target.mkdir()  # fails when something appeared since the check
                self._made.append(self.target)
                self.path = self.target
            else:
                self.path = partial_path(self.target, self.file)
                _remove(self.path)
                if not self.file:
                    self.path.mkdir()
                self._made.append(self.path)
        except FileExistsError:
            raise self._refuse(f"appeared while it was being checked; it is left as it is. Choose another "
                               f"{self.option}") from None
        except OSError as e:
            raise self._refuse(f"cannot write there ({e.strerror or e}); choose another {self.option}") from None

    # -- closing ------------------------------------------------------------------------------

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def commit(self) -> Path:
        """Put the complete output in place (see the module's (d)); returns the target."""
        if self._done:
            return self.target
        try:
            if self.path != self.target:
                _fsync(self.path)
                self._swap()
                _fsync(self.target.parent)
            self._made = []
            self._done = True
        finally:
            if not self._done:
                self.abort()
        self._release()
        return self.target

    def abort(self) -> None:
        """Remove what this output made (never the target it did not create)."""
        if self._done:
            return
        self._done = True
        self._cleanup()

    def _cleanup(self) -> None:
        self._release()  # first: its file sits in the folders made on the way
        for p in reversed(self._made):
            if p == self.path and p != self.target:
                _let_writes_end()
                _remove(p)  # the partial
            else:  # folders made on the way, and a recording's own folder: only while empty
                try:
                    p.rmdir()
                except OSError:
                    pass
        self._made = []

    def _release(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def _swap(self) -> None:
        tmp, t = self.path, self.target
        if self._old is None:
            try:
                if not _rename2(tmp, t, _NOREPLACE):  # no renameat2 here: look, then move
                    if os.path.lexists(t):
                        raise FileExistsError(t)
                    os.rename(tmp, t)
            except FileExistsError:
                raise self._appeared() from None
            return
        if not _rename2(tmp, t, _EXCHANGE):
            self._swap_without_exchange()
            return
        # what came out must be what was checked on entering; if it is not, it goes back
        if _identity(tmp) == self._old:
            if self._was_empty:
                try:
                    tmp.rmdir()  # fails when something was put into the empty folder
                    return
                except OSError:
                    pass
            elif self.replaces(tmp):
                _remove(tmp)
                return
        _rename2(tmp, t, _EXCHANGE)
        raise self._appeared()

    def _swap_without_exchange(self) -> None:
        tmp, t = self.path, self.target
        if _identity(t) != self._old or (self._was_empty and not is_empty_folder(t)):
            raise self._appeared()
        old = t.with_name(f".{t.name}.old-{os.getpid()}")
        os.rename(t, old)
        os.rename(tmp, t)
        _remove(old)

    def _appeared(self) -> OutputError:
        return self._refuse(f"something else was put there while the {self.what} was written; it is left as "
                            f"it is and the new {self.what} was removed. Choose another {self.option}")


def replace_folder(tmp: Path, target: Path) -> None:
    """Move the complete folder `tmp` to `target` in one step, over an old `target` (exchanged,
    then removed) or where there was none: a process killed at any moment leaves the old folder or
    the new one. For a writer's own sub-folder (a run's model/); user-facing outputs use Output."""
    _fsync(tmp)
    if target.exists():
        if _rename2(tmp, target, _EXCHANGE):
            _remove(tmp)
        else:  # no renameat2 here (macOS, NFS): the old one steps aside first, and comes back on a failure
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old, target)
                raise
            _remove(old)
    else:
        os.rename(tmp, target)
    _fsync(target.parent)


def remove_stale_copies(target: Path) -> None:
    """Remove what replace_folder's writers that no longer run left beside `target`: their
    `.NAME.tmp-PID` (a new folder never swapped in, or the old one swapped out) and, while `target`
    is there, their `.NAME.old-PID`."""
    for p in target.parent.glob(f".{glob_escape(target.name)}.*-*"):
        kind, _, pid = p.name.rpartition("-")
        if kind.endswith((".tmp", ".old")) and pid.isdigit() and int(pid) != os.getpid() and not _running(int(pid)):
            if kind.endswith(".tmp") or target.exists():
                _remove(p)


def _rename2(a: Path, b: Path, flags: int) -> bool:
    """renameat2(a, b, flags); False where the system has no renameat2 or the filesystem lacks the
    flag. Raises FileExistsError (NOREPLACE onto something) and other OSErrors."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    if err in (errno.EEXIST, errno.ENOTEMPTY):
        raise FileExistsError(err, os.strerror(err), str(b))
    raise OSError(err, os.strerror(err), str(b))


def write_file(path: Path, data: bytes) -> None:
    """Write a small file whole: a temporary beside it, fsynced, renamed over `path`, the folder
    fsynced (a process killed at any moment leaves the old content or the new)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync(path.parent)


def fsync(path: Path) -> None:
    """Flush a file or folder to the disk (nothing where the system cannot)."""
    _fsync(path)


def _let_writes_end(timeout: float = 10.0) -> None:
    """Wait for the chunk writes still under way in zarr's I/O thread: a Ctrl-C stops the main
    thread, not the writes it handed to that thread, and those would go on writing into a partial
    (making its folders again) while and after it is removed."""
    sync = sys.modules.get("zarr.core.sync")  # not imported: nothing was written through zarr
    loop = getattr(sync, "loop", [None])[0]
    if loop is None or loop.is_closed() or not loop.is_running():
        return

    async def the_others() -> None:
        pending = asyncio.all_tasks() - {asyncio.current_task()}
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    try:
        asyncio.run_coroutine_threadsafe(the_others(), loop).result(timeout + 1)
    except Exception:  # the loop stopped or the wait ran out: remove what is there
        pass


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
