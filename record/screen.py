"""Record your own game: screen capture (mss) on a fixed schedule, with the keyboard, mouse and
gamepad input of every frame, into a store.

The capture loop runs on deadlines (frame k is due at t0 + k / fps, so the rate never drifts):
at each deadline it cuts the input interval that just ended (record/inputs.py), grabs the
region, resizes it with area interpolation and hands frame, time and the previous frame's action
to the writer thread (record/queued_writer.py). It never waits for the writer: a deadline that
passed unserved (the machine was busy) or a frame that found the writer's queue full is counted
as dropped, and the next frame's action covers the longer interval.

Recording is on between the start and a pause (hotkey, or another window taking the focus when
recording a --window); each stretch is one episode. Ctrl-C, SIGTERM, the stop hotkey or
--duration stop it cleanly; a killed recorder leaves a store that holds everything up to its
last flush (the store's committed length).
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dreamcade.dataset import presets
from dreamcade.dataset.controls import ControlSpec, SpecError
from dreamcade.dataset.errors import UserError, plural
from dreamcade.dataset.store import StoreWriter
from dreamcade.record.capture import CaptureError, Target, grab
from dreamcade.record.inputs import KEY_NAMES, DisplayError, InputState, KeyboardMouse, check_sources
from dreamcade.record.queued_writer import QueuedWriter
from dreamcade.record.status import DiskUsage, Status

CHECK_EVERY = 0.05  # seconds between checks of the window's place and focus


class RecordError(UserError, RuntimeError):
    """A recording that cannot start or go on; the message says what to fix."""


@dataclass
class ScreenRecording:
    """What `dreamcade record screen` records; every field maps to a command-line option."""

    out: str = "session.zarr"
    controls: str = "platformer"
    """Control profile: a TOML file, or the name of one in configs/controls/."""
    monitor: int | None = None
    """mss monitor number: 1 is the first monitor, 0 all monitors together (the default is 1)."""
    region: tuple[int, int, int, int] | None = None
    """(x, y, width, height) on the screen, in pixels."""
    window: str | None = None
    """Part of a window's title or class, or its X11 id ("0x1e00007")."""
    fps: float = 30.0
    size: tuple[int, int] = (256, 144)
    """(width, height) of the stored frames; captures are resized with area interpolation."""
    pause_key: str = "f9"
    stop_key: str = "f10"
    countdown: float = 0.0
    """Seconds between the start and the first frame."""
    wait: bool = False
    """Wait for the pause key before recording anything."""
    duration: float | None = None
    """Stop after this many seconds of recording (pauses not counted)."""
    follow_focus: bool = True
    """--window: pause while another window has the keyboard focus."""
    queue_seconds: float = 2.0
    """Frames the writer queue holds, in seconds of recording, before frames are dropped."""
    flush_seconds: float = 2.0
    """A killed recorder loses at most about this much (plus one chunk of frames)."""
    gamepad_hz: float = 250.0
    """Gamepad polls per second: the time resolution of gamepad events."""
    overwrite: bool = False
    quiet: bool = False
    """No status line (messages are still printed)."""


def profile_path(name: str) -> Path:
    """A profile file, or a name ("fps") of one in ./configs/controls or dreamcade's own."""
    return presets.find(name, "controls", ".toml")


def load_profile(name: str) -> ControlSpec:
    """Read and check a control profile; SpecError names the file and the field."""
    path = profile_path(name)
    spec = ControlSpec.from_toml(path)
    check_sources(spec, str(path))
    return spec


def check_hotkeys(rec: ScreenRecording, spec: ControlSpec) -> None:
    for option, key in (("--pause-key", rec.pause_key), ("--stop-key", rec.stop_key)):
        if key not in KEY_NAMES:
            raise RecordError(f"{option} {key!r} is not a key name (use e.g. f9, f10, pause, scroll_lock)")
        users = [c.name for c in spec.controls if c.source == f"key:{key}"]
        if users:
            raise RecordError(f"{option} {key}: the profile {rec.controls} records that key as control "
                              f"{users[0]!r}; choose another hotkey")
    if rec.pause_key == rec.stop_key:
        raise RecordError(f"--pause-key and --stop-key are both {rec.pause_key}; choose two keys")


def check_numbers(rec: ScreenRecording) -> None:
    if not (math.isfinite(rec.fps) and 0 < rec.fps <= 240):
        raise RecordError(f"--fps must be in (0, 240], got {rec.fps}")
    if min(rec.size) <= 0:
        raise RecordError(f"--size must be positive, got {rec.size[0]}x{rec.size[1]}")
    if rec.duration is not None and rec.duration <= 0:
        raise RecordError(f"--duration must be positive, got {rec.duration}")
    if rec.countdown < 0 or rec.queue_seconds <= 0 or rec.flush_seconds < 0 or rec.gamepad_hz <= 0:
        raise RecordError("--countdown and --flush-seconds must be >= 0; --queue-seconds and "
                          "--gamepad-hz > 0")


# -- the recorder --------------------------------------------------------------------------------

class ScreenRecorder:
    """Records a ScreenRecording; run() blocks until it stops and returns the capture stats.

    listen=False leaves out the keyboard and mouse (and so the hotkeys; stop with
    request_stop()): for tests that drive only a gamepad in this process.
    """

    def __init__(self, rec: ScreenRecording, spec: ControlSpec | None = None, *, listen: bool = True,
                 stream=None) -> None:
        check_numbers(rec)
        self.rec = rec
        try:
            self.spec = spec if spec is not None else load_profile(rec.controls)
        except SpecError as e:
            raise RecordError(str(e)) from None
        check_hotkeys(rec, self.spec)
        self.listen = listen
        self.state = InputState(self.spec)
        self.status = Status(stream, rec.quiet)
        self.period = 1.0 / rec.fps
        self.started = threading.Event()  # set once the first frame is captured
        self._stop = threading.Event()
        self._toggle = threading.Event()
        self.stop_reason = ""
        self.captured = self.dropped = self.episodes = 0
        self.recorded_seconds = 0.0
        self._span_start: float | None = None  # time of the current episode's first frame
        self._user_on = not rec.wait  # the pause key's state
        self._start_at: float | None = None  # when the countdown ends
        self._counted: int | None = None  # the countdown's last number shown
        self._focus_ok = True

    def request_stop(self, reason: str = "stopped") -> None:
        if not self._stop.is_set():
            self.stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def request_toggle(self) -> None:
        self._toggle.set()

    @property
    def recording(self) -> bool:
        return self._span_start is not None

    def elapsed(self) -> float:
        """Seconds recorded so far (pauses not counted)."""
        extra = time.monotonic() - self._span_start if self._span_start is not None else 0.0
        return self.recorded_seconds + extra

    # -- run -----------------------------------------------------------------------------------

    def run(self) -> dict:
        cpu0, wall0 = time.process_time(), time.monotonic()
        sct = self._open_mss()
        target = writer = None
        devices: list = []
        try:
            target = self._target(sct)
            devices = self._start_devices()  # before the store: a failure leaves no empty store
            writer = self._open_writer(target)
            self._intro(target)
            with stop_on_signals(self):
                threading.Thread(target=self._status_loop, args=(writer,), daemon=True).start()
                self._loop(sct, target, writer)
        finally:
            self._stop.set()
            if self.recording:
                self._end(writer, "")
            for d in devices:
                d.stop()
            if writer is not None:
                writer.drain()
                stats = self._stats(writer, cpu0, wall0)
                writer.close({"capture_stats": stats})
            if target is not None:
                target.close()
            sct.close()
        if writer.error is not None:
            raise RecordError(f"writing {self.rec.out} failed ({type(writer.error).__name__}: "
                              f"{writer.error}); it holds what was flushed before")
        self._summary(stats)
        return stats

    def _target(self, sct) -> Target:
        rec = self.rec
        try:
            return Target(sct, monitor=rec.monitor, region=rec.region, window=rec.window,
                          follow_focus=rec.follow_focus)
        except CaptureError as e:
            raise RecordError(str(e)) from None

    def _open_mss(self):
        import mss

        try:
            return mss.MSS()
        except Exception as e:  # mss raises ScreenShotError without a display
            hint = " (DISPLAY is not set)" if sys.platform.startswith("linux") and not os.environ.get("DISPLAY") else ""
            raise RecordError(f"cannot capture the screen{hint}: {e}. Run inside a desktop session "
                              "or a virtual X server (Xvfb)") from None

    def _open_writer(self, target: Target) -> QueuedWriter:
        rec = self.rec
        source = {"kind": "screen", **target.source, "profile": str(profile_path(rec.controls)),
                  "capture": "mss", "platform": sys.platform}
        w = StoreWriter(rec.out, spec=self.spec, fps=rec.fps, frame_size=tuple(rec.size), source=source,
                        capture_size=tuple(target.size), events=True, flush_seconds=rec.flush_seconds,
                        overwrite=rec.overwrite)
        return QueuedWriter(w, capacity=max(2, round(rec.queue_seconds * rec.fps)))

    def _start_devices(self) -> list:
        devices = []
        if self.listen:
            kb = KeyboardMouse(self.state, {self.rec.pause_key: self.request_toggle,
                                            self.rec.stop_key: lambda: self.request_stop("stop key")})
            try:
                kb.start()
            except DisplayError as e:
                raise RecordError(str(e)) from None
            devices.append(kb)
        if self.state.wants_prefix("pad:"):
            from dreamcade.record.gamepad import GamepadReader

            pad = GamepadReader(self.state, self.rec.gamepad_hz, on_change=self.status.message)
            pad.start()
            devices.append(pad)
        return devices

    # -- the capture loop ----------------------------------------------------------------------

    def _loop(self, sct, target: Target, writer: QueuedWriter) -> None:
        """Until stopped: decide whether to record, and serve each frame's deadline."""
        next_check = next_due = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_check:
                next_check = now + CHECK_EVERY
                self._focus_ok = self._check(target, writer, self._focus_ok)
            want = self._want(now)
            if self._stop.is_set():
                break
            if self.recording and not want:
                self._end(writer, "paused" if not self._user_on else "paused: another window has the focus")
            if self.recording:
                next_due = self._serve(sct, target, writer, next_due)
            elif want and not writer.full():
                next_due = self._shoot(sct, target, writer, first=True) + self.period
            else:
                time.sleep(0.02)

    def _want(self, now: float) -> bool:
        """Whether recording should be on: the pause key, the countdown, the focus, --duration."""
        rec = self.rec
        if self._toggle.is_set():
            self._toggle.clear()
            self._user_on = not self._user_on
            if not self._user_on and not self.recording:
                self.status.message("paused")
                if self.episodes == 0:
                    self._start_at = None  # the countdown starts again on the next start
        if self.episodes == 0:
            if self._user_on and self._start_at is None:
                self._start_at = now + rec.countdown
            if self._start_at is None or now < self._start_at:
                self._countdown(now)
                return False
        if rec.duration is not None and self.elapsed() >= rec.duration:
            self.request_stop("duration reached")
            return False
        return self._user_on and self._focus_ok

    def _serve(self, sct, target: Target, writer: QueuedWriter, next_due: float) -> float:
        """Capture the frame due at next_due once it is due, or count it (and any other missed
        deadline) as dropped; returns the next deadline. Deadlines are t0 + k / fps."""
        now = time.monotonic()
        if now < next_due:
            time.sleep(min(next_due - now, 0.02))
            return next_due
        missed = int((now - next_due) / self.period)  # deadlines that passed unserved
        self.dropped += missed
        if writer.full():  # the writer is behind: drop rather than wait
            self.dropped += 1
        else:
            self._shoot(sct, target, writer, first=False)
        return next_due + (missed + 1) * self.period

    def _check(self, target: Target, writer: QueuedWriter, focus_ok: bool) -> bool:
        """Writer health, the window's place and focus; returns whether recording may go on."""
        if writer.error is not None or not writer.alive:
            self.request_stop("the store could not be written")
            return False
        if not target.follow():
            self.request_stop("the window was closed")
            return False
        focused = target.focused()
        if focused is None:  # a window went away mid-question: keep the last answer
            return focus_ok
        if focus_ok and not focused and not self.recording:
            stop = f"press {self.rec.stop_key.upper()}" if self.listen else "press Ctrl-C"
            self.status.message(f"waiting: another window has the focus; click the game window, or {stop} "
                                "to stop; --ignore-focus records regardless")
        return focused

    def _countdown(self, now: float) -> None:
        if self._start_at is None:
            return
        n = math.ceil(self._start_at - now)
        if n != self._counted:
            self.status.message(f"recording in {n}...")
            self._counted = n

    def _shoot(self, sct, target: Target, writer: QueuedWriter, first: bool) -> float:
        """Cut the input interval, grab a frame, queue both; returns the frame's time."""
        if first:
            t, action, events = self.state.open(), None, []
            self._span_start = t
            self.episodes += 1
            self.status.message(f"recording {'started' if self.episodes == 1 else 'resumed'} "
                                f"(episode {self.episodes})")
        else:
            t, action, events = self.state.cut()
        writer.frame(grab(sct, target.region(), self.rec.size), t, action, events)
        self.captured += 1
        self.started.set()
        return t

    def _end(self, writer: QueuedWriter, message: str) -> None:
        t, action, events = self.state.close()
        writer.end_episode(action, events)
        self.recorded_seconds += t - self._span_start
        self._span_start = None
        if message:
            self.status.message(f"{message} (episode {self.episodes} ended)")

    # -- reporting -----------------------------------------------------------------------------

    def _intro(self, target: Target) -> None:
        rec, spec = self.rec, self.spec
        w, h = rec.size
        self.status.message(f"recording {target.describe()} -> {w}x{h} at {rec.fps:g} fps into {rec.out}")
        names = ", ".join(f"{c.name} ({c.source})" for c in spec.controls)
        self.status.message(f"controls ({spec.name or rec.controls}): {names}; nothing else is recorded")
        keys = f"{rec.pause_key.upper()} pause/resume, {rec.stop_key.upper()} stop, " if self.listen else ""
        self.status.message(f"{keys}Ctrl-C stop")
        if rec.wait:
            self.status.message(f"press {rec.pause_key.upper()} to start recording")

    def _status_loop(self, writer: QueuedWriter) -> None:
        disk = DiskUsage(self.rec.out)
        every = 0.5 if self.status.tty else 1.0
        last_n, last_t = self.captured, self.elapsed()
        while not self._stop.wait(every):
            n, t = self.captured, self.elapsed()
            fps = (n - last_n) / (t - last_t) if t > last_t else 0.0
            last_n, last_t = n, t
            state = "REC" if self.recording else "PAUSED"
            self.status.line(f"{state} {int(t // 60)}:{t % 60:04.1f}  {fps:5.1f} fps  dropped {self.dropped}  "
                             f"written {writer.written}  {disk.mb():.2f} MB")

    def _stats(self, writer: QueuedWriter | None, cpu0: float, wall0: float) -> dict:
        wall = time.monotonic() - wall0
        cpu = time.process_time() - cpu0
        secs = self.recorded_seconds
        return {"frames": writer.written if writer else 0, "episodes": self.episodes,
                "captured": self.captured, "dropped": self.dropped, "recorded_seconds": round(secs, 3),
                "achieved_fps": round(self.captured / secs, 3) if secs > 0 else 0.0,
                "cpu_seconds": round(cpu, 3), "wall_seconds": round(wall, 3),
                "cpu_fraction": round(cpu / wall, 4) if wall > 0 else 0.0,
                "stop_reason": self.stop_reason, "unrecorded_keys": self._unrecorded_keys()}

    def _unrecorded_keys(self) -> dict[str, int]:
        """Presses, while recording, of keys the profile does not record: the most pressed first."""
        counts = self.state.unrecorded
        return {key: counts[key] for key in sorted(counts, key=lambda k: (-counts[k], k))}

    def _summary(self, stats: dict) -> None:
        mb = DiskUsage(self.rec.out).mb()
        self.status.message(f"stopped ({self.stop_reason or 'done'}): {stats['frames']} frames in "
                            f"{plural(stats['episodes'], 'episode')}, {stats['recorded_seconds']:.1f} s at "
                            f"{stats['achieved_fps']:.1f} fps, {stats['dropped']} dropped; {mb:.2f} MB")
        if stats["unrecorded_keys"]:
            self.status.message(unrecorded_hint(stats["unrecorded_keys"], self.spec.name or self.rec.controls))


def unrecorded_hint(counts: dict[str, int], profile: str) -> str:
    """One line: the keys pressed that the profile does not record, how often, and how to record
    them (a control per key, or a shipped profile that has them all)."""
    pressed = ", ".join(f"{key} {n}x" for key, n in counts.items())
    first = next(iter(counts))
    fix = f"a [[controls]] table with name = {json.dumps(first)} and source = {json.dumps('key:' + first)}"
    wanted = {f"key:{key}" for key in counts}
    shipped = [p for p in presets.names("controls", ".toml")
               if wanted <= {c.source for c in load_profile(p).controls}]
    also = f", or use --controls {shipped[0]}" if shipped else ""
    return (f"not recorded: {pressed} (keys the profile {profile} does not record); to record them, "
            f"add a control per key to the profile, e.g. {fix}{also}")


@contextmanager
def stop_on_signals(recorder: ScreenRecorder):
    """Ctrl-C and SIGTERM stop the recorder cleanly (a second Ctrl-C interrupts at once).
    Signal handlers belong to the main thread; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame):
        if signum == signal.SIGINT and recorder.stopping:
            raise KeyboardInterrupt
        recorder.request_stop("Ctrl-C" if signum == signal.SIGINT else "SIGTERM")

    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
