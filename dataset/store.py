"""The recording store: one zarr v3 group per session (docs/store-format.md).

Arrays: `frames` uint8 [T, H, W, 3], `actions` float32 [T, A], `time` float64 [T],
`episode_starts` int64 [E], and optionally `events/time` float64, `events/control` int32,
`events/value` float32 (raw input events; `control` indexes the control spec).
`actions[t]` is the input held from frame t to frame t+1.

Crash safety: zarr grows an array's shape before its data lands, so after a kill the tail of an
array can read back as zeros and arrays can differ in length. The writer therefore keeps
`committed` in the group attributes, rewritten only after every array of an append is written,
and the reader never reads past it. Each file write in zarr's LocalStore is a temp file plus
rename, so a chunk or a metadata file is either the old one or the new one.

Reading also works from any URL that fsspec understands (`s3://bucket/x.zarr`, `file:///...`,
`memory://...`): `Store.path` is then the URL string; writing stays local.
"""

from __future__ import annotations

import json
import math
import os
import time as _time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

from dreamcade.dataset.controls import ControlSpec, SpecError
from dreamcade.dataset.errors import UserError
from dreamcade.dataset.outputs import Output, is_url, local

FORMAT_NAME = "dreamcade.recording"
FORMAT_VERSION = 1
ARRAY_CHUNK = 4096  # rows per chunk of the small 1-D/2-D arrays


class StoreError(UserError):
    """A store that cannot be opened or read; the message names the file and the fix."""


def software_version() -> str:
    try:
        from importlib.metadata import version
        return version("dreamcade")
    except Exception:
        return "unknown"


def frame_chunk(height: int, width: int, target_bytes: int = 1 << 20) -> int:
    """Frames per chunk: a power of two near `target_bytes` a chunk, between 8 and 256."""
    per_frame = height * width * 3
    n = 2 ** round(math.log2(max(1.0, target_bytes / per_frame)))
    return int(min(256, max(8, n)))


class _Tail:
    """Pending rows of one array, kept from the start of a chunk so that every write is whole
    chunks: a partial chunk written by one flush is rewritten whole by the next."""

    def __init__(self, array: zarr.Array, chunk: int) -> None:
        self.array, self.chunk = array, chunk
        self.start = array.shape[0]
        self.rows: list[np.ndarray] = []
        self.written = 0  # rows of self.rows already on disk

    @property
    def length(self) -> int:
        return self.start + len(self.rows)

    def add(self, row: np.ndarray) -> None:
        self.rows.append(row)

    def flush(self) -> None:
        if len(self.rows) == self.written:
            return
        end = self.length
        if self.array.shape[0] < end:
            self.array.resize((end, *self.array.shape[1:]))
        self.array[self.start:end] = np.stack(self.rows)
        full = (len(self.rows) // self.chunk) * self.chunk
        self.rows = self.rows[full:]
        self.start += full
        self.written = len(self.rows)


class StoreWriter:
    """Appends frames, actions and events to a new store, chunk by chunk.

    Use as a context manager, or call close(). Data is flushed when a chunk of frames is full,
    when `flush_seconds` have passed since the last flush, and on flush() or close().

    Where the store is written:
    - a recording (atomic=False) to a new path is written in place: a process killed at any
      point leaves a store that opens and holds everything up to the last flush, and leaving
      the `with` block on an error (Ctrl-C included) closes it with what it holds;
    - a derived store (atomic=True, e.g. `dreamcade data build`), and any store that replaces an
      existing one (overwrite=True), is written in a hidden sibling and moved into place by
      close() only: until then the target holds the old store or nothing. An atomic writer left
      on an error is aborted: its partial folder is removed.
    The target is checked, locked and put in place by dataset.outputs.Output (pass `output` to
    use one its caller opened before any work; `inputs` are stores it may not touch).
    """

    def __init__(self, path: str | Path, *, spec: ControlSpec, fps: float, frame_size: tuple[int, int],
                 source: dict, capture_size: tuple[int, int] | None = None, events: bool = False,
                 chunk_frames: int | None = None, flush_seconds: float = 2.0,
                 extra_attrs: dict | None = None, overwrite: bool = False, atomic: bool = False,
                 inputs: list[str | Path] = (), output: Output | None = None) -> None:
        """frame_size and capture_size are (width, height) in pixels."""
        self.path = Path(path)
        self.atomic = atomic
        self.spec, self.fps = spec, float(fps)
        w, h = frame_size
        bad = (f"frame size must be positive, got {w}x{h}" if w <= 0 or h <= 0 else
               f"fps must be positive, got {fps}" if not fps > 0 else None)
        if bad:
            if output is not None:
                output.abort()
            raise StoreError(f"{self.path}: {bad}")
        self.frame_shape = (h, w, 3)
        self.output = output or store_output(path, overwrite, inputs, in_place="never" if atomic else "when_new")
        self.write_path = self.output.path
        self.closed = False
        try:
            self.root = zarr.open_group(str(self.write_path), mode="w", zarr_format=3)
            self._create_arrays(chunk_frames or frame_chunk(h, w), len(spec), events)
            cap = capture_size or frame_size
            self.root.attrs.update({
                "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "fps": self.fps,
                "source": source, "frame_size": [w, h], "capture_size": [int(cap[0]), int(cap[1])],
                "control_spec": spec.to_dict(), "created": _time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "software_version": software_version(), "has_events": bool(events),
                "closed": False, "committed": self._committed(), **(extra_attrs or {}),
            })
        except BaseException:
            self.abort()
            raise
        self.flush_seconds = flush_seconds
        self._last_flush = _time.monotonic()
        self._new_episode = True

    def _create_arrays(self, chunk_frames: int, n_actions: int, events: bool) -> None:
        h, w, _ = self.frame_shape

        def tail(group: zarr.Group, name: str, shape: tuple, chunk: int, dtype: str) -> _Tail:
            # every chunk is written, even one equal to the fill value, so that a missing chunk
            # file inside the committed length always means damage
            arr = group.create_array(name, shape=(0, *shape), chunks=(chunk, *shape), dtype=dtype,
                                     compressors=ZstdCodec(level=3), config={"write_empty_chunks": True})
            return _Tail(arr, chunk)

        self._frames = tail(self.root, "frames", (h, w, 3), chunk_frames, "uint8")
        self._actions = tail(self.root, "actions", (n_actions,), ARRAY_CHUNK, "float32")
        self._time = tail(self.root, "time", (), ARRAY_CHUNK, "float64")
        self._starts = tail(self.root, "episode_starts", (), ARRAY_CHUNK, "int64")
        self._tails = [self._frames, self._actions, self._time, self._starts]
        self._events = None
        if events:
            ev = self.root.create_group("events")
            self._events = tuple(tail(ev, name, (), ARRAY_CHUNK, dtype) for name, dtype in
                                 (("time", "float64"), ("control", "int32"), ("value", "float32")))
            self._tails += list(self._events)

    # -- appending -----------------------------------------------------------------------------

    @property
    def n_frames(self) -> int:
        return self._frames.length

    def begin_episode(self) -> None:
        """Mark the next appended frame as the start of a new episode."""
        self._new_episode = True

    def append(self, frame: np.ndarray, action: np.ndarray, t: float) -> None:
        """Append one frame [H, W, 3] uint8, the action held until the next frame, its time (s)."""
        if frame.shape != self.frame_shape or frame.dtype != np.uint8:
            raise StoreError(f"{self.path}: frame must be uint8 {list(self.frame_shape)}, "
                             f"got {frame.dtype} {list(frame.shape)}")
        action = np.asarray(action, np.float32)
        if action.shape != (len(self.spec),):
            raise StoreError(f"{self.path}: action must have {len(self.spec)} values "
                             f"({self.spec.names}), got shape {list(action.shape)}")
        if self._new_episode:
            self._starts.add(np.int64(self.n_frames))
            self._new_episode = False
        self._frames.add(frame)
        self._actions.add(action)
        self._time.add(np.float64(t))
        if len(self._frames.rows) >= self._frames.chunk or (
                _time.monotonic() - self._last_flush >= self.flush_seconds):
            self.flush()

    def add_event(self, t: float, control: int, value: float) -> None:
        """Record one raw input event of control `control` (its index in the spec)."""
        if self._events is None:
            raise StoreError(f"{self.path}: this store was created without events=True")
        self._events[0].add(np.float64(t))
        self._events[1].add(np.int32(control))
        self._events[2].add(np.float32(value))

    def flush(self) -> None:
        """Write everything pending, then move the committed lengths forward."""
        for tail in self._tails:
            tail.flush()
        self.root.attrs["committed"] = self._committed()
        self._last_flush = _time.monotonic()

    def close(self) -> None:
        """Write what is pending, mark the store closed, and move it into place if built beside."""
        if self.closed:
            return
        try:
            self.flush()
            self.root.attrs["closed"] = True
        except BaseException:
            self.abort()
            raise
        self.closed = True
        self.output.commit()

    def abort(self) -> None:
        """Drop a store being built beside its target (the target is left as it was); a recording
        written in place keeps what it flushed."""
        if self.closed:
            return
        self.closed = True
        self.output.abort()

    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None and self.atomic:
            self.abort()
        else:
            self.close()

    def _committed(self) -> dict:
        c = {"frames": self._frames.length, "episode_starts": self._starts.length}
        if self._events is not None:
            c["events"] = self._events[0].length
        return c


def store_exists(path: str | Path) -> bool:
    """Whether something is at a store path or URL (a quick look: nothing is validated)."""
    try:
        return _Files(path).exists()
    except StoreError:
        return False


def absolute(path: str | Path) -> str:
    """A store path as a config keeps it: a local path made absolute, a URL as it is."""
    p = store_path(path)
    return p if isinstance(p, str) else str(local(p, "store"))


def store_path(path: str | Path) -> str | Path:
    """A store's path as Store keeps it: the URL string as given, or a local Path."""
    return path.rstrip("/") if is_url(path) else Path(path)


class _Files:
    """The files of a store being read, local (pathlib, one stat a check) or behind a URL
    (fsspec); keys are relative paths such as "frames/zarr.json"."""

    def __init__(self, path: str | Path) -> None:
        self.path = store_path(path)
        self.fs, self._seen = None, set()
        if is_url(self.path):
            import fsspec

            try:
                self.fs, self.root = fsspec.core.url_to_fs(self.path)
            except (ValueError, ImportError) as e:
                raise StoreError(f"{self.path}: cannot be opened ({e})") from None

    def name(self, key: str = "") -> str | Path:
        """What messages call a file of the store."""
        if not key:
            return self.path
        return f"{self.path}/{key}" if self.fs is not None else self.path / key

    def exists(self) -> bool:
        return self.fs.exists(self.root) if self.fs is not None else self.path.exists()

    def is_dir(self) -> bool:
        return self.fs.isdir(self.root) if self.fs is not None else self.path.is_dir()

    def is_file(self, key: str) -> bool:
        if self.fs is None:
            return (self.path / key).is_file()
        if key not in self._seen:  # one request per file, not one per read (files only come)
            if not self.fs.isfile(f"{self.root}/{key}"):
                return False
            self._seen.add(key)
        return True

    def read_text(self, key: str) -> str:
        if self.fs is not None:
            return self.fs.cat_file(f"{self.root}/{key}").decode()
        return (self.path / key).read_text()

    def nbytes(self) -> int:
        if self.fs is not None:
            return int(self.fs.du(self.root))
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())

    def group(self) -> zarr.Group:
        if self.fs is None:
            return zarr.open_group(str(self.path), mode="r")
        from zarr.storage import FsspecStore

        return zarr.open_group(FsspecStore(self.fs if self.fs.async_impl else _async(self.fs), read_only=True,
                                           path=self.root), mode="r")


def _async(fs):
    from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

    return AsyncFileSystemWrapper(fs, asynchronous=True)


def store_output(path: str | Path, overwrite: bool = False, inputs: list[str | Path] = (), option: str = "--out",
                 in_place: str = "never", can_overwrite: bool = True) -> Output:
    """The checked, locked output of a store at `path` (dataset.outputs); --overwrite replaces
    only a dreamcade store."""
    return Output(path, what="dreamcade store", inputs=inputs, overwrite=overwrite, option=option,
                  replaces=looks_like_store, in_place=in_place, can_overwrite=can_overwrite).__enter__()


def looks_like_store(path: Path) -> bool:
    try:
        meta = json.loads((path / "zarr.json").read_text())
        return meta.get("attributes", {}).get("format") == FORMAT_NAME
    except (OSError, ValueError):
        return False


SKIP_HINT = ("to leave out the episodes it touches, pass --skip-damaged (dreamcade train: "
             "data.skip_damaged=true)")


@dataclass(frozen=True)
class Damage:
    """A missing or undecodable chunk: rows [start, stop) of one array."""

    array: str
    start: int
    stop: int
    message: str


@dataclass(frozen=True)
class Episode:
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start


class Store:
    """A validated, read-only view of a store that never reads past the committed length."""

    damage_hint = SKIP_HINT
    """What a damage refusal tells the user to do; a command without --skip-damaged sets its own."""

    def __init__(self, path: str | Path, expect_spec: ControlSpec | None = None) -> None:
        self.files = _Files(path)
        self.path = self.files.path
        self.root = _open_group(self.files)
        self.attrs = dict(self.root.attrs)
        meta = self.files.name("zarr.json")
        fmt = self.attrs.get("format")
        if fmt != FORMAT_NAME:
            raise StoreError(f"{meta}: not a dreamcade recording (attribute 'format' is {fmt!r}, "
                             f"expected {FORMAT_NAME!r})")
        version = self.attrs.get("format_version")
        if not isinstance(version, int):
            raise StoreError(f"{meta}: attribute 'format_version' is missing or not an integer")
        if version > FORMAT_VERSION:
            raise StoreError(f"{meta}: format version {version} is newer than this dreamcade reads "
                             f"(up to {FORMAT_VERSION}); upgrade dreamcade to read it")
        for key in ("fps", "control_spec", "committed", "frame_size", "source"):
            if key not in self.attrs:
                raise StoreError(f"{meta}: attribute {key!r} is missing; the store is broken")
        try:
            self.spec = ControlSpec.from_dict(self.attrs["control_spec"], where=f"{meta} control_spec")
        except SpecError as e:
            raise StoreError(str(e)) from None
        if expect_spec is not None:
            try:
                self.spec.check_same(expect_spec, str(self.path), "the expected control profile")
            except SpecError as e:
                raise StoreError(str(e)) from None
        self.fps = float(self.attrs["fps"])
        self.frames = self._array("frames", np.uint8, 4)
        self.actions = self._array("actions", np.float32, 2)
        self.time_array = self._array("time", np.float64, 1)
        self.starts_array = self._array("episode_starts", np.int64, 1)
        self.committed = self.attrs["committed"]
        self.n_frames = int(self.committed.get("frames", -1))
        self._check_lengths()
        self.frame_shape = tuple(self.frames.shape[1:])
        self._starts = None
        self._time = None
        self._damage: list[Damage] | None = None

    # -- metadata ------------------------------------------------------------------------------

    @property
    def height(self) -> int:
        return self.frame_shape[0]

    @property
    def width(self) -> int:
        return self.frame_shape[1]

    @property
    def closed_cleanly(self) -> bool:
        return bool(self.attrs.get("closed", False))

    @property
    def has_events(self) -> bool:
        return "events" in self.committed

    def __len__(self) -> int:
        return self.n_frames

    @property
    def episode_starts(self) -> np.ndarray:
        if self._starts is None:
            k = int(self.committed["episode_starts"])
            starts = self._read(self.starts_array, slice(0, k))
            self._starts = starts[starts < self.n_frames]
        return self._starts

    @property
    def time(self) -> np.ndarray:
        if self._time is None:
            self._time = self._read(self.time_array, slice(0, self.n_frames))
        return self._time

    def episodes(self) -> list[Episode]:
        starts = list(self.episode_starts) + [self.n_frames]
        return [Episode(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:]) if b > a]

    def problems(self) -> list[str]:
        """What is odd about the store without reading chunk data (a killed writer's tail)."""
        out = []
        if not self.closed_cleanly:
            out.append("not closed cleanly (the writer was killed or crashed); "
                       f"{self.n_frames} committed frames are readable")
        lengths = {k: self.root[k].shape[0] for k in ("frames", "actions", "time")}
        extra = {k: n - self.n_frames for k, n in lengths.items() if n > self.n_frames}
        if extra:
            out.append("uncommitted tail ignored: " + ", ".join(f"{k} +{n}" for k, n in extra.items()))
        if len(set(lengths.values())) > 1:
            out.append("array lengths differ past the committed length: "
                       + ", ".join(f"{k}={n}" for k, n in lengths.items()))
        return out + [d.message for d in self.missing_chunks()]

    def missing_chunks(self) -> list[Damage]:
        """Chunk files missing inside the committed length (a quick look: nothing is decoded)."""
        arrays = [self.root[name] for name in self._array_names()]
        return [d for arr in arrays for c in range(-(-self._committed_length(arr.path) // arr.chunks[0]))
                if (d := self._missing(arr, c)) is not None]

    def nbytes_on_disk(self) -> int:
        return self.files.nbytes()

    # -- data ----------------------------------------------------------------------------------

    def read_frames(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._read(self.frames, self._clip(start, stop))

    def read_actions(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._read(self.actions, self._clip(start, stop))

    def read_time(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        return self._read(self.time_array, self._clip(start, stop))

    def read_events(self) -> dict[str, np.ndarray]:
        if not self.has_events:
            return {}
        k = int(self.committed["events"])
        return {name: self._read(self.root[f"events/{name}"], slice(0, k))
                for name in ("time", "control", "value")}

    def damage(self) -> list[Damage]:
        """Decode every committed chunk; one Damage per missing or undecodable chunk."""
        out = []
        for name in self._array_names():
            arr, n = self.root[name], self._committed_length(name)
            step = arr.chunks[0]
            for c in range(-(-n // step)):
                missing = self._missing(arr, c)
                if missing is not None:
                    out.append(missing)
                    continue
                try:
                    arr[c * step:min(n, (c + 1) * step)]
                except Exception as e:  # zarr raises codec-specific errors
                    out.append(Damage(name, c * step, min(n, (c + 1) * step), f"{self._chunk_file(arr, c)}: "
                                      f"chunk cannot be decoded ({type(e).__name__}: {e})"))
        return out

    def verify(self) -> list[str]:
        """Decode every committed chunk; return one line per damaged or missing chunk."""
        return [d.message for d in self.damage()]

    def damaged_episodes(self) -> tuple[list[Episode], list[str]]:
        """The episodes whose frames, actions or times touch a damaged chunk, and the damage
        lines. Damage in the episode index cannot be skipped (StoreError); damage in the raw
        input events does not touch an episode. Cached."""
        lines = [(ep, self.damage_between(ep.start, ep.stop)) for ep in self.episodes()]
        return [ep for ep, line in lines if line], [line for _, line in lines if line]

    def damage_between(self, start: int, stop: int) -> str | None:
        """The first damage line of the frames, actions or times of rows [start, stop), or None
        (damage in the episode index: StoreError). Cached."""
        if self._damage is None:
            self._damage = self.damage()
        index = [d for d in self._damage if d.array == "episode_starts"]
        if index:
            self._damaged(index[0].message + " (the episode index: no episode can be located)")
        return next((d.message for d in self._damage if d.array in ("frames", "actions", "time")
                     and d.start < stop and start < d.stop), None)

    def _array_names(self) -> list[str]:
        names = ["frames", "actions", "time", "episode_starts"]
        if self.has_events:
            names += ["events/time", "events/control", "events/value"]
        return names

    def _committed_length(self, name: str) -> int:
        if name in ("frames", "actions", "time"):
            return self.n_frames
        if name == "episode_starts":
            return int(self.committed["episode_starts"])
        return int(self.committed["events"])

    def _clip(self, start: int, stop: int | None) -> slice:
        stop = self.n_frames if stop is None else stop
        if not 0 <= start <= stop <= self.n_frames:
            raise IndexError(f"{self.path}: frames [{start}, {stop}) outside [0, {self.n_frames})")
        return slice(start, stop)

    def _missing(self, arr: zarr.Array, chunk: int) -> Damage | None:
        """The Damage of chunk `chunk` of `arr` when its file is not there (one stat, no read)."""
        key = self._chunk_key(arr, chunk)
        if self.files.is_file(key):
            return None
        step, n = arr.chunks[0], self._committed_length(arr.path)
        a, b = chunk * step, min(n, (chunk + 1) * step)
        return Damage(arr.path, a, b, f"{self.files.name(key)}: chunk file is missing (rows {a}-{b - 1})")

    def _chunk_key(self, arr: zarr.Array, chunk: int) -> str:
        return f"{arr.path}/{arr.metadata.encode_chunk_key((chunk,) + (0,) * (arr.ndim - 1))}"

    def _chunk_file(self, arr: zarr.Array, chunk: int) -> str | Path:
        return self.files.name(self._chunk_key(arr, chunk))

    def _read(self, arr: zarr.Array, sl: slice) -> np.ndarray:
        """Rows `sl` of `arr`; a chunk file missing inside them (which zarr would read as zeros)
        or one that does not decode is refused with the file and the rows."""
        step = arr.chunks[0]
        for c in range(sl.start // step, -(-sl.stop // step)):
            missing = self._missing(arr, c)
            if missing is not None:
                self._damaged(f"{missing.message} of {arr.path!r} would read as zeros")
        try:
            return np.asarray(arr[sl])
        except Exception as e:
            bad = [line for line in self.verify() if f"/{arr.path}/" in line.replace(os.sep, "/")]
            self._damaged(bad[0] if bad else f"{self.files.name(arr.path)}: {type(e).__name__}: {e}")

    def _damaged(self, where: str):
        raise StoreError(f"{where}. The store is damaged: `dreamcade data info --verify {self.path}` "
                         f"lists every damaged chunk; {self.damage_hint}") from None

    def _array(self, name: str, dtype, ndim: int) -> zarr.Array:
        meta = self.files.name(f"{name}/zarr.json")
        if name not in self.root:
            raise StoreError(f"{meta}: array {name!r} is missing; the store is broken")
        try:
            arr = self.root[name]
        except Exception as e:
            raise StoreError(f"{meta}: cannot be read ({e})") from None
        if not isinstance(arr, zarr.Array) or arr.ndim != ndim or arr.dtype != dtype:
            raise StoreError(f"{meta}: expected a {ndim}-d {np.dtype(dtype).name} array")
        return arr

    def _check_lengths(self) -> None:
        meta = self.files.name("zarr.json")
        n = self.n_frames
        for arr in (self.frames, self.actions, self.time_array):
            if not 0 <= n <= arr.shape[0]:
                raise StoreError(f"{meta}: committed length {n} exceeds the {arr.path!r} array "
                                 f"({arr.shape[0]} rows); the store is broken")
        if self.actions.shape[1] != len(self.spec):
            raise StoreError(f"{meta}: actions have {self.actions.shape[1]} columns but the control "
                             f"spec names {len(self.spec)}")
        k = int(self.committed.get("episode_starts", -1))
        if not 0 <= k <= self.starts_array.shape[0]:
            raise StoreError(f"{meta}: committed episode count {k} is out of range; the store is broken")


def _open_group(files: _Files) -> zarr.Group:
    path = files.path
    if not files.exists():
        raise StoreError(f"{path}: no such store. Record one with `dreamcade record env ...` or "
                         "`dreamcade record screen ...`")
    if not files.is_dir():
        raise StoreError(f"{path}: is a file, not a store (a store is a folder ending in .zarr)")
    meta = files.name("zarr.json")
    if not files.is_file("zarr.json"):
        raise StoreError(f"{path}: not a store (no zarr.json inside); point at a folder written "
                         "by `dreamcade record` or `dreamcade data build`")
    try:
        json.loads(files.read_text("zarr.json"))
        root = files.group()
    except Exception as e:
        raise StoreError(f"{meta}: cannot be read as a zarr v3 group ({type(e).__name__}: {e})") from None
    return root


def open_store(path: str | Path, expect_spec: ControlSpec | None = None) -> Store:
    """Open and validate a store, a local folder or a URL fsspec reads; raises StoreError with
    a message that names the file."""
    return Store(path, expect_spec)
