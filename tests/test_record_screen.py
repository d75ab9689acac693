"""Recording your own game (`dreamcade record screen`) under a real X server (Xvfb): frames of the
square game with xdotool key presses, a virtual gamepad, hotkeys, window focus, privacy, a
SIGKILL mid-session, and clear errors for bad input.

Timing checks compare stored event times with stored frame times (one monotonic clock, shared
with this process), never wall-clock sleeps: "within one frame" means the frame interval that
contains the event, give or take one frame.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import ROOT
from dreamcade.dataset import Control, ControlSpec, open_store
from dreamcade.record.__main__ import main as record_main
from dreamcade.record.inputs import InputState, check_sources, pygame_key_name, pynput_key_name
from dreamcade.record.screen import ScreenRecorder, ScreenRecording, load_profile
from dreamcade.record.square_game import BACKGROUND

# tests that take the `xvfb` fixture skip when Xvfb is not installed; these need xdotool as well
needs_xdotool = pytest.mark.skipif(shutil.which("xdotool") is None,
                                   reason="xdotool is not installed (Debian: apt-get install xdotool)")
GAME = "dreamcade square game"


@pytest.fixture(scope="module")
def xvfb():
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (Debian: apt-get install xvfb)")
    from dreamcade.record.xvfb import Xvfb

    with Xvfb(640, 480) as x:
        yield x


class Proc:
    """A background `python -m ...` whose output lines are collected with their arrival time."""

    def __init__(self, args: list[str], env: dict) -> None:
        self.p = subprocess.Popen([sys.executable, *args], cwd=ROOT, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[tuple[float, str]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def wait_for(self, pattern: str, timeout: float = 30.0, after: int = 0) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for _, line in self.lines[after:]:
                m = re.search(pattern, line)
                if m:
                    return m
            if self.p.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.02)
        raise AssertionError(f"no line matching {pattern!r}; output:\n{self.text}")

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def finish(self, timeout: float = 30.0) -> int:
        rc = self.p.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return rc

    def kill(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


@pytest.fixture
def spawn(xvfb):
    procs = []

    def start(*args: str, **env: str) -> Proc:
        proc = Proc(list(args), {**xvfb.env(), "SDL_AUDIODRIVER": "dummy", "PYTHONUNBUFFERED": "1", **env})
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()


def start_game(spawn, pos: str = "0,0", title: str = GAME, size: str = "160x120") -> tuple[Proc, str]:
    game = spawn("-m", "dreamcade.record.square_game", "--size", size, "--title", title, SDL_VIDEO_WINDOW_POS=pos)
    wid = game.wait_for(r"window (0x[0-9a-f]+) ready").group(1)
    return game, wid


def start_recorder(spawn, out, *args: str, started: bool = True) -> Proc:
    rec = spawn("-m", "dreamcade", "record", "screen", "--out", str(out), *args)
    if started:
        rec.wait_for(r"recording started")
    return rec


def xdo(xvfb, *args: str) -> None:
    subprocess.run(["xdotool", *args], env=xvfb.env(), check=True, timeout=10)


def frame_of(times: np.ndarray, t: float) -> int:
    """The frame whose interval [times[k], times[k+1]) holds t."""
    return int(np.searchsorted(times, t, side="right")) - 1


def square_x(frames: np.ndarray) -> np.ndarray:
    """x of the square's centre in each frame (pixels): white, or red while z is held."""
    square = np.abs(frames.astype(int) - BACKGROUND).sum(axis=3) > 200
    assert square.any(axis=(1, 2)).all(), "a frame without the square"
    return np.array([np.argwhere(m)[:, 1].mean() for m in square])


def named_events(s) -> list[tuple[str, float, float]]:
    ev = s.read_events()
    return [(s.spec.names[c], float(v), float(t)) for t, c, v in zip(ev["time"], ev["control"], ev["value"])]


# -- under Xvfb, driven by xdotool ---------------------------------------------------------------

@needs_xdotool
def test_keys_sent_with_xdotool_move_the_square_and_land_in_the_right_frames(xvfb, spawn, tmp_path):
    start_game(spawn)
    out = tmp_path / "keys.zarr"
    fps = 10.0
    rec = start_recorder(spawn, out, "--window", "square game", "--fps", str(fps), "--size", "80x60",
                         "--controls", "platformer")
    time.sleep(0.5)
    t0 = time.monotonic()
    xdo(xvfb, "keydown", "Right")
    t1 = time.monotonic()
    time.sleep(0.6)
    xdo(xvfb, "keyup", "Right")
    time.sleep(0.3)
    t2 = time.monotonic()
    xdo(xvfb, "keydown", "z", "keyup", "z")  # a tap of about 10 ms, far shorter than a frame
    t3 = time.monotonic()
    time.sleep(0.3)
    xdo(xvfb, "type", "helloqwerty")  # keys the profile does not name
    time.sleep(0.3)
    xdo(xvfb, "key", "F10")
    assert rec.finish() == 0, rec.text

    s = open_store(out, expect_spec=load_profile("platformer"))
    assert s.closed_cleanly and s.verify() == []
    assert s.attrs["capture_size"] == [160, 120] and s.attrs["source"]["window"] == GAME
    frames, actions, times = s.read_frames(), s.read_actions(), s.time
    assert frames.shape == (len(s), 60, 80, 3) and len(s) >= 20
    assert (np.diff(times) > 0).all()
    assert abs(np.median(np.diff(times)) - 1 / fps) < 0.1 / fps, "frames are not on the fps schedule"
    period = 1 / fps

    ev = named_events(s)
    assert [(n, v) for n, v, _ in ev] == [("right", 1), ("right", 0), ("z", 1), ("z", 0)], \
        "only the profile's keys, each press and release once"
    right_down, right_up, z_down, z_up = (t for _, _, t in ev)
    # the events are timestamped when they were sent (give or take one frame)
    assert t0 - 0.01 <= right_down <= t1 + period
    assert t2 - 0.01 <= z_down <= z_up <= t3 + period
    assert abs(frame_of(times, right_down) - frame_of(times, t0)) <= 1

    right = s.spec.index("right")
    k_down, k_up = frame_of(times, right_down), frame_of(times, right_up)
    assert k_down >= 3, "recording started well before the key"
    np.testing.assert_array_equal(actions[:k_down, right], 0)
    np.testing.assert_array_equal(actions[k_down:k_up + 1, right], 1)
    np.testing.assert_array_equal(actions[k_up + 1:, right], 0)

    # the tap is shorter than one frame interval and still shows, in the frame(s) it touched
    assert z_up - z_down < period
    z = s.spec.index("z")
    on = np.flatnonzero(actions[:, z])
    assert list(on) == list(range(frame_of(times, z_down), frame_of(times, z_up) + 1)) and len(on) in (1, 2)
    others = [i for i, n in enumerate(s.spec.names) if n not in ("right", "z")]
    np.testing.assert_array_equal(actions[:, others], 0)

    # the frames show the square still before the key and moving right after it
    x = square_x(frames)
    assert np.ptp(x[:k_down]) <= 0.5, f"the square moved before the key was pressed: {x[:k_down]}"
    moving = x[k_down + 2:k_up + 1]
    assert moving[-1] > x[0] + 5 and (np.diff(moving) >= 0).all(), f"square x over time: {x}"
    assert np.ptp(x[k_up + 3:]) <= 0.5, "the square kept moving after the key was released"


@needs_xdotool
def test_hotkeys_pause_and_resume_episodes_and_only_profile_inputs_are_stored(xvfb, spawn, tmp_path):
    start_game(spawn)
    out = tmp_path / "hotkeys.zarr"
    rec = start_recorder(spawn, out, "--region", "0,0,160,120", "--fps", "20", "--size", "32x24",
                         "--controls", "platformer")
    time.sleep(0.3)
    xdo(xvfb, "type", "mypassword")  # recording, but not in the profile: counted, never stored
    xdo(xvfb, "key", "Up")  # in the profile: stored
    time.sleep(0.2)
    n = len(rec.lines)
    xdo(xvfb, "key", "F9")
    rec.wait_for(r"paused \(episode 1 ended\)", after=n)
    paused_at = time.monotonic()
    xdo(xvfb, "key", "Left", "x")  # in the profile, but recording is paused
    xdo(xvfb, "type", "secret")
    resumed_at = time.monotonic()
    n = len(rec.lines)
    xdo(xvfb, "key", "F9")
    rec.wait_for(r"recording resumed \(episode 2\)", after=n)
    time.sleep(0.2)
    xdo(xvfb, "key", "Down")
    time.sleep(0.2)
    xdo(xvfb, "key", "F10")
    assert rec.finish() == 0, rec.text
    assert "stopped (stop key)" in rec.text

    s = open_store(out)
    assert s.closed_cleanly
    assert [(n, v) for n, v, _ in named_events(s)] == [("up", 1), ("up", 0), ("down", 1), ("down", 0)]
    assert not any(paused_at <= t <= resumed_at for _, _, t in named_events(s))
    eps = s.episodes()
    assert len(eps) == 2
    gap = s.time[eps[1].start] - s.time[eps[0].stop - 1]
    assert gap > resumed_at - paused_at, "the pause is a gap between the two episodes"
    actions = s.read_actions()
    idle = [i for i, n in enumerate(s.spec.names) if n not in ("up", "down")]
    np.testing.assert_array_equal(actions[:, idle], 0)
    assert actions[:, s.spec.index("up")].sum() >= 1 and actions[:, s.spec.index("down")].sum() >= 1
    assert s.attrs["capture_stats"]["episodes"] == 2
    assert s.attrs["capture_stats"]["unrecorded_keys"] == {"s": 2, "a": 1, "d": 1, "m": 1, "o": 1, "p": 1,
                                                           "r": 1, "w": 1, "y": 1}, "not while paused"


@needs_xdotool
def test_window_focus_pauses_recording_and_ctrl_c_closes_cleanly(xvfb, spawn, tmp_path):
    _, wid = start_game(spawn)
    xdo(xvfb, "windowfocus", wid)
    out = tmp_path / "focus.zarr"
    rec = start_recorder(spawn, out, "--window", GAME, "--fps", "20", "--size", "32x24")
    time.sleep(0.3)
    xdo(xvfb, "key", "Right")
    n = len(rec.lines)
    _, other = start_game(spawn, pos="300,0", title="another app", size="100x100")  # takes the focus
    xdo(xvfb, "windowfocus", other)
    rec.wait_for(r"paused: another window has the focus", after=n)
    xdo(xvfb, "key", "Left")  # typed into the other window: not recorded
    n = len(rec.lines)
    xdo(xvfb, "windowfocus", wid)
    rec.wait_for(r"recording resumed \(episode 2\)", after=n)
    time.sleep(0.2)
    xdo(xvfb, "key", "Up")
    time.sleep(0.2)
    rec.p.send_signal(signal.SIGINT)
    assert rec.finish() == 0, rec.text
    s = open_store(out)
    assert s.closed_cleanly and len(s.episodes()) == 2
    assert [(n, v) for n, v, _ in named_events(s)] == [("right", 1), ("right", 0), ("up", 1), ("up", 0)]
    assert s.attrs["capture_stats"]["stop_reason"] == "Ctrl-C"


@needs_xdotool
def test_mouse_motion_is_summed_per_frame_and_closing_the_window_stops(xvfb, spawn, tmp_path):
    game, _ = start_game(spawn)
    xdo(xvfb, "mousemove", "100", "100")
    out = tmp_path / "mouse.zarr"
    rec = start_recorder(spawn, out, "--window", GAME, "--fps", "20", "--size", "32x24", "--controls", "fps")
    time.sleep(0.2)
    xdo(xvfb, "mousemove", "110", "100")  # +10, 0 from where the pointer was at the start
    time.sleep(0.2)
    xdo(xvfb, "mousemove_relative", "--", "30", "-12", "click", "1")
    time.sleep(0.2)
    xdo(xvfb, "type", "wasd")  # in the profile: stored
    time.sleep(0.2)
    game.p.terminate()  # the recorded window goes away: the recording stops by itself
    assert rec.finish() == 0, rec.text
    assert "stopped (the window was closed)" in rec.text
    s = open_store(out)
    assert s.closed_cleanly
    actions = s.read_actions()
    dx, dy, left = (actions[:, s.spec.index(n)] for n in ("mouse_dx", "mouse_dy", "mouse_left"))
    assert dx.sum() == 40 and dy.sum() == -12
    assert set(np.flatnonzero(dx)) == {frame_of(s.time, t) for n, _, t in named_events(s) if n == "mouse_dx"}
    assert left.sum() >= 1
    for key in "wasd":
        assert actions[:, s.spec.index(key)].sum() >= 1


@needs_xdotool
def test_keys_held_before_the_start_read_held_from_the_first_frame(xvfb, spawn, tmp_path):
    profile = tmp_path / "modifiers.toml"
    profile.write_text('[[controls]]\nname = "ctrl"\nsource = "key:ctrl"\n\n'
                       '[[controls]]\nname = "shift"\nsource = "key:shift"\n\n'
                       '[[controls]]\nname = "left"\nsource = "key:left"\n')
    out = tmp_path / "held.zarr"
    xdo(xvfb, "keydown", "Control_L", "keydown", "Shift_L")  # modifiers never auto-repeat
    try:
        rec = start_recorder(spawn, out, "--region", "0,0,64,48", "--fps", "20", "--size", "16x12",
                             "--controls", str(profile))
        time.sleep(0.4)
        xdo(xvfb, "keyup", "Shift_L")
        time.sleep(0.3)
        xdo(xvfb, "keyup", "Control_L")
        time.sleep(0.3)
        xdo(xvfb, "key", "F10")
    finally:
        xdo(xvfb, "keyup", "Shift_L", "keyup", "Control_L")
    assert rec.finish() == 0, rec.text

    s = open_store(out)
    ev = named_events(s)
    assert sorted((n, v) for n, v, _ in ev) == [("ctrl", 0), ("ctrl", 1), ("shift", 0), ("shift", 1)]
    assert all(t == s.time[0] for _, v, t in ev if v == 1), "held at the start: pressed at the first frame"
    actions = s.read_actions()
    for name in ("ctrl", "shift"):
        k_up = frame_of(s.time, next(t for n, v, t in ev if n == name and v == 0))
        assert k_up >= 5, f"{name} was released well after the start"
        np.testing.assert_array_equal(actions[:, s.spec.index(name)], [float(k <= k_up) for k in range(len(s))])
    np.testing.assert_array_equal(actions[:, s.spec.index("left")], 0)


def test_an_ambiguous_window_name_is_refused_with_the_candidates(xvfb, spawn, monkeypatch, tmp_path, capsys):
    from dreamcade.record.x11 import X11Window

    _, first = start_game(spawn, title="square game one")
    _, second = start_game(spawn, pos="300,0", title="square game two")
    monkeypatch.setenv("DISPLAY", xvfb.display)
    out = tmp_path / "x.zarr"
    assert record_main(["screen", "--out", str(out), "--window", "square game", "--duration", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --window 'square game': 2 windows match") and err.count("\n") == 1, err
    assert f"{first} 'square game one'" in err and f"{second} 'square game two'" in err
    assert "give the window's id, e.g. --window 0x" in err
    assert not out.exists()
    for name, wid in (("Square Game Two", second), (first, first)):  # an exact title, an id
        window = X11Window(name)
        assert window.id == int(wid, 16)
        window.close()


@needs_xdotool
def test_keys_the_profile_does_not_record_are_counted_and_named_at_the_end(xvfb, spawn, tmp_path):
    out = tmp_path / "unrecorded.zarr"
    rec = start_recorder(spawn, out, "--region", "0,0,64,48", "--fps", "20", "--size", "16x12",
                         "--controls", "platformer")
    time.sleep(0.3)
    xdo(xvfb, "key", "w", "w", "w", "Right", "d", "w", "w")
    xdo(xvfb, "keydown", "a")
    time.sleep(1.0)  # past the auto-repeat delay: still one press
    xdo(xvfb, "keyup", "a")
    n = len(rec.lines)
    xdo(xvfb, "key", "F9")
    rec.wait_for(r"paused \(episode 1 ended\)", after=n)
    xdo(xvfb, "key", "w", "q")  # paused: not counted
    n = len(rec.lines)
    xdo(xvfb, "key", "F9")
    rec.wait_for(r"recording resumed", after=n)
    xdo(xvfb, "key", "d")
    time.sleep(0.2)
    xdo(xvfb, "key", "F10")
    assert rec.finish() == 0, rec.text

    s = open_store(out)
    assert s.attrs["capture_stats"]["unrecorded_keys"] == {"w": 5, "d": 2, "a": 1}
    assert [(n, v) for n, v, _ in named_events(s)] == [("right", 1), ("right", 0)]
    line = rec.wait_for(r"^not recorded: .*").group(0)
    assert line.startswith("not recorded: w 5x, d 2x, a 1x (keys the profile platformer does not record)")
    assert 'a [[controls]] table with name = "w" and source = "key:w"' in line and line.endswith("or use --controls fps")


@needs_xdotool
def test_closing_the_window_while_waiting_for_the_focus_stops_within_a_second(xvfb, spawn, tmp_path):
    game, _ = start_game(spawn)
    _, other = start_game(spawn, pos="300,0", title="another app", size="100x100")
    xdo(xvfb, "windowfocus", other)
    out = tmp_path / "closed.zarr"
    rec = start_recorder(spawn, out, "--window", GAME, "--fps", "20", "--size", "32x24", started=False)
    line = rec.wait_for(r"^waiting: another window has the focus.*").group(0)
    assert line == ("waiting: another window has the focus; click the game window, or press F10 to stop; "
                    "--ignore-focus records regardless")
    time.sleep(0.3)
    game.kill()
    closed = time.monotonic()
    assert rec.finish(timeout=10) == 0, rec.text
    stopped_at = next(t for t, text in rec.lines if text.startswith("stopped ("))
    assert "stopped (the window was closed)" in rec.text
    assert stopped_at - closed < 1.0, f"stopped {stopped_at - closed:.2f} s after the window closed"


def test_sigkill_mid_session_leaves_a_store_with_everything_flushed(xvfb, spawn, tmp_path):
    start_game(spawn)
    out = tmp_path / "killed.zarr"
    rec = start_recorder(spawn, out, "--monitor", "1", "--fps", "30", "--size", "32x24",
                         "--flush-seconds", "0.2", "--countdown", "0.3", started=False)
    rec.wait_for(r"recording in 1\.\.\.")
    rec.wait_for(r"recording started")
    written = int(rec.wait_for(r"written ([2-9]\d|\d{3,})").group(1))  # at least 20 frames appended
    time.sleep(1.0)  # several flushes later
    os.kill(rec.p.pid, signal.SIGKILL)
    rec.finish()
    s = open_store(out)
    assert not s.closed_cleanly and any("not closed cleanly" in p for p in s.problems())
    assert len(s) >= written, "frames appended a flush period before the kill must be on disk"
    frames, actions = s.read_frames(), s.read_actions()
    assert frames.shape == (len(s), 24, 32, 3) and actions.shape == (len(s), len(s.spec))
    assert (frames.reshape(len(s), -1).max(axis=1) > 0).all(), "no zero (unwritten) frames"
    assert (np.diff(s.time) > 0).all()
    assert s.verify() == []


def test_focus_follows_the_window_manager_or_else_the_x_input_focus(xvfb, monkeypatch):
    monkeypatch.setenv("DISPLAY", xvfb.display)
    from Xlib import X, Xatom, display

    from dreamcade.record.x11 import X11Window

    d = display.Display()
    root, atom = d.screen().root, d.intern_atom
    game, other = (root.create_window(x, 300, 60, 60, 0, d.screen().root_depth) for x in (0, 200))
    inner = game.create_window(5, 5, 20, 20, 0, d.screen().root_depth)
    for w, title in ((game, "focus test game"), (other, "focus test other")):
        w.set_wm_name(title)
        w.map()
    inner.map()
    d.sync()
    target = X11Window("focus test game")
    try:
        # a window manager's _NET_ACTIVE_WINDOW (EWMH)
        root.change_property(atom("_NET_SUPPORTING_WM_CHECK"), Xatom.WINDOW, 32, [other.id])
        for active, expected in ((game.id, True), (other.id, False), (0, False)):
            root.change_property(atom("_NET_ACTIVE_WINDOW"), Xatom.WINDOW, 32, [active])
            d.sync()
            assert target.focused() is expected, f"active window {active:#x}"
        # no window manager: the X server's input focus, a window inside counts as the window
        root.delete_property(atom("_NET_SUPPORTING_WM_CHECK"))
        for focus, expected in ((other, False), (game, True), (inner, True)):
            focus.set_input_focus(X.RevertToPointerRoot, X.CurrentTime)
            d.sync()
            assert target.focused() is expected
        # focus follows the pointer: the window under it
        d.set_input_focus(X.PointerRoot, X.RevertToPointerRoot, X.CurrentTime)
        for x, expected in ((30, True), (230, False)):
            root.warp_pointer(x, 330)
            d.sync()
            assert target.focused() is expected
    finally:
        root.delete_property(atom("_NET_ACTIVE_WINDOW"))
        game.destroy()
        other.destroy()
        d.close()
        target.close()


# -- the gamepad (a virtual controller in this process) ------------------------------------------

@pytest.fixture
def pad(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")
    from virtual_gamepad import VirtualGamepad

    made = []

    def attach() -> VirtualGamepad:
        made.append(VirtualGamepad())
        return made[-1]

    yield attach
    for p in made:
        p.detach()
    import pygame

    pygame.quit()


def pad_spec() -> ControlSpec:
    return ControlSpec((Control("a", source="pad:button:a"), Control("b", source="pad:button:b"),
                        Control("lx", "continuous", "pad:axis:leftx"),
                        Control("rt", "continuous", "pad:axis:righttrigger", 0.0, 1.0),
                        Control("hat_x", "continuous", "pad:hat:0:x"), Control("hat_y", "continuous", "pad:hat:0:y")))


def test_gamepad_reader_reads_buttons_sticks_triggers_hat_and_survives_a_replug(pad):
    from dreamcade.record.gamepad import GamepadReader

    state = InputState(pad_spec())
    reader = GamepadReader(state)
    reader.poll()  # no pad yet: nothing happens, nothing fails
    assert reader.pad is None
    p = pad()
    reader.poll()
    assert reader.name == "Virtual Controller"
    state.open()
    p.button("a", True)
    reader.poll()
    p.button("b", True)  # a tap between two frame cuts, seen by two polls
    reader.poll()
    p.button("b", False)
    p.axis("leftx", -0.5)
    p.axis("righttrigger", 0.75)
    p.hat(1, 1)
    reader.poll()
    _, action, events = state.cut()
    np.testing.assert_allclose(action, [1, 1, -0.5, 0.75, 1, 1], atol=1e-3)
    assert sorted(c for _, c, _ in events) == [0, 1, 1, 2, 3, 4, 5]  # a, b down and up, lx, rt, hat
    _, action, _ = state.cut()  # a still held, b released, levels kept
    np.testing.assert_allclose(action, [1, 0, -0.5, 0.75, 1, 1], atol=1e-3)
    p.detach()  # unplugged while a is held: released, levels back to rest
    reader.poll()
    assert reader.pad is None
    _, action, _ = state.cut()
    np.testing.assert_allclose(action, [1, 0, 0, 0, 0, 0], atol=1e-3)  # a was held during this frame
    _, action, _ = state.cut()
    np.testing.assert_allclose(action, 0, atol=1e-3)
    q = pad()  # plugged in again
    reader.poll()
    q.button("b", True)
    reader.poll()
    assert reader.pad is not None
    _, action, _ = state.cut()
    assert action[1] == 1
    reader.close()


def test_recorder_stores_gamepad_input_in_the_frames_it_happened(xvfb, pad, monkeypatch, tmp_path):
    monkeypatch.setenv("DISPLAY", xvfb.display)
    p = pad()
    out = tmp_path / "pad.zarr"
    fps = 20.0
    rec = ScreenRecording(out=str(out), region=(0, 0, 32, 24), fps=fps, size=(16, 12), quiet=True)
    recorder = ScreenRecorder(rec, pad_spec(), listen=False)
    result = {}
    thread = threading.Thread(target=lambda: result.update(recorder.run()))
    thread.start()
    try:
        assert recorder.started.wait(20)
        time.sleep(0.25)
        sent_a = time.monotonic()
        p.button("a", True)
        time.sleep(0.3)
        p.button("a", False)
        sent_lx = time.monotonic()
        p.axis("leftx", -0.5)
        time.sleep(0.2)
        p.button("b", True)  # a 15 ms tap, shorter than a frame (50 ms)
        time.sleep(0.015)
        p.button("b", False)
        time.sleep(0.2)
    finally:
        recorder.request_stop()
        thread.join(20)
    assert result["frames"] > 10 and result["dropped"] == 0

    s = open_store(out, expect_spec=pad_spec())
    actions, times = s.read_actions(), s.time
    ev = named_events(s)
    assert [(n, v) for n, v, _ in ev if n in ("a", "b")] == [("a", 1), ("a", 0), ("b", 1), ("b", 0)]
    a_down, a_up = (t for n, _, t in ev if n == "a")
    assert sent_a <= a_down <= sent_a + 1 / fps
    k0, k1 = frame_of(times, a_down), frame_of(times, a_up)
    assert k0 >= 3
    np.testing.assert_array_equal(actions[:, 0], [1.0 if k0 <= k <= k1 else 0.0 for k in range(len(s))])
    b_down, b_up = (t for n, _, t in ev if n == "b")
    assert 0 < b_up - b_down < 1 / fps
    on = np.flatnonzero(actions[:, 1])
    assert list(on) == list(range(frame_of(times, b_down), frame_of(times, b_up) + 1))
    # a stick is sampled at the end of each frame's interval
    lx_t = next(t for n, _, t in ev if n == "lx")
    assert sent_lx <= lx_t <= sent_lx + 1 / fps
    ends = np.append(times[1:], np.inf)
    np.testing.assert_allclose(actions[:, 2], np.where(ends > lx_t, -0.5, 0.0), atol=1e-3)


def test_capture_never_waits_for_a_slow_writer_it_drops_frames(xvfb, monkeypatch, tmp_path):
    from dreamcade.dataset.store import StoreWriter

    monkeypatch.setenv("DISPLAY", xvfb.display)
    slow = StoreWriter.append

    def append(self, *args):
        time.sleep(0.1)  # a disk that takes 100 ms a frame
        slow(self, *args)

    monkeypatch.setattr(StoreWriter, "append", append)
    spec = ControlSpec((Control("left", source="key:left"),))
    rec = ScreenRecording(out=str(tmp_path / "slow.zarr"), region=(0, 0, 32, 24), fps=50, size=(8, 6),
                          duration=1.0, queue_seconds=0.1, quiet=True)
    stats = ScreenRecorder(rec, spec, listen=False).run()
    assert stats["dropped"] >= 20, stats
    assert abs(stats["captured"] + stats["dropped"] - 50) <= 2, "every deadline is captured or dropped"
    assert len(open_store(rec.out)) == stats["frames"] == stats["captured"]


# -- input state and names (no X needed) ---------------------------------------------------------

def test_frame_assembly_holds_taps_sums_motion_samples_axes_and_drops_the_rest():
    now = [0.0]
    spec = ControlSpec((Control("jump", source="key:space"), Control("dx", "continuous", "mouse:dx", -50, 50),
                        Control("lx", "continuous", "pad:axis:leftx")))
    st = InputState(spec, clock=lambda: now[0])
    st.set("key:space", 1.0)  # before recording: remembered as held, stored at the start
    st.add("mouse:dx", 7)
    st.set("key:a", 1.0)  # not in the spec: not counted before the start
    assert st.open() == 0.0
    st.set("key:a", 0.0)
    st.set("key:a", 1.0)
    st.set("key:a", 1.0)  # auto-repeat
    st.set("mouse:right", 1.0)
    assert st.unrecorded == {"a": 1}
    now[0] = 0.01
    st.set("key:space", 0.0)
    st.set("key:space", 1.0)
    now[0] = 0.02
    st.set("key:space", 0.0)  # pressed and released within the interval
    st.add("mouse:dx", 3)
    st.add("mouse:dx", -1)
    st.set("pad:axis:leftx", 0.2)
    st.set("pad:axis:leftx", 0.6)
    now[0] = 0.033
    t, action, events = st.cut()
    assert t == 0.033
    np.testing.assert_allclose(action, [1, 2, 0.6])
    assert events == [(0.0, 0, 1.0), (0.01, 0, 0.0), (0.01, 0, 1.0), (0.02, 0, 0.0), (0.02, 1, 3.0),
                      (0.02, 1, -1.0), (0.02, 2, 0.2), (0.02, 2, 0.6)], "held at the start: an event at the start"
    _, action, events = st.cut()
    np.testing.assert_allclose(action, [0, 0, 0.6])
    assert events == []
    st.set("key:space", 1.0)
    st.set("key:space", 1.0)  # auto-repeat: no new event
    _, action, events = st.close()
    assert action[0] == 1 and len(events) == 1
    st.set("key:space", 0.0)  # after the stop: not stored
    st.add("mouse:dx", 5)
    assert st.cut()[2] == []
    now[0] = 0.05
    st.open()  # a stick off rest across the pause: stored at the new start
    assert st.cut()[2] == [(0.05, 2, pytest.approx(0.6))]


def test_key_names_from_pynput_and_pygame_are_the_same():
    key = lambda name: SimpleNamespace(name=name)  # pynput's Key members have .name
    char = lambda c: SimpleNamespace(char=c)  # KeyCode has .char
    assert [pynput_key_name(key(n)) for n in ("left", "shift_r", "ctrl_l", "alt", "enter", "esc", "f9", "space")] \
        == ["left", "shift", "ctrl", "alt", "enter", "esc", "f9", "space"]
    assert [pynput_key_name(char(c)) for c in ("a", "Z", "1", "!", "\x01", "?")] == ["a", "z", "1", "1", "a", "/"]
    assert pynput_key_name(key("media_play_pause")) is None and pynput_key_name(char(None)) is None
    assert [pygame_key_name(n) for n in ("left", "left shift", "right ctrl", "return", "escape", "f9",
                                         "space", "a", "1", "page up")] \
        == ["left", "shift", "ctrl", "enter", "esc", "f9", "space", "a", "1", "page_up"]
    import pygame

    assert pygame_key_name(pygame.K_RSHIFT) == "shift" and pygame_key_name(pygame.K_z) == "z"


def test_shipped_profiles_are_valid():
    names = {p: load_profile(p).names for p in ("platformer", "fps", "gamepad")}
    assert names["platformer"] == ["left", "right", "up", "down", "space", "ctrl", "z", "x", "c", "shift"]
    assert {"w", "a", "s", "d", "space", "ctrl", "mouse_left", "mouse_right", "mouse_dx", "mouse_dy"} == set(names["fps"])
    assert {"a", "b", "leftx", "lefty", "lefttrigger", "righttrigger", "dpup"} <= set(names["gamepad"])


# -- errors --------------------------------------------------------------------------------------

def test_help_works_without_a_display():
    env = {k: v for k, v in os.environ.items() if k != "DISPLAY"}
    proc = subprocess.run([sys.executable, "-m", "dreamcade", "record", "screen", "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for word in ("--window", "--region", "--monitor", "--controls", "--pause-key", "f9", "f10",
                 "Only the inputs that the control profile names are recorded"):
        assert word in proc.stdout


BAD_PROFILES = {
    "unknown key": ('[[controls]]\nname = "jump"\nsource = "key:spacebar"\n',
                    r"bad\.toml: controls\[0\] \('jump'\) source 'key:spacebar' is not an input the recorder "
                    r"knows; key names are lower-case"),
    "wrong kind": ('[[controls]]\nname = "dx"\nsource = "mouse:dx"\n',
                   r"bad\.toml: controls\[0\] \('dx'\) source 'mouse:dx' is continuous; set kind = \"continuous\""),
    "no source": ('[[controls]]\nname = "fire"\n', r"bad\.toml: controls\[0\] \('fire'\) source is empty"),
    "bad pad": ('[[controls]]\nname = "fire"\nsource = "pad:button:triangle"\n',
                r"source 'pad:button:triangle' is not an input .*pad:button:<a\|b\|x"),
    "toml": ('[[controls]\nname = "x"\n', r"bad\.toml: not valid TOML"),
    "unknown field": ('[[controls]]\nname = "x"\nkey = "x"\n', r"bad\.toml: controls\[0\] has unknown keys \['key'\]"),
    "hotkey": ('[[controls]]\nname = "pause"\nsource = "key:f9"\n',
               r"--pause-key f9: the profile .*bad\.toml records that key as control 'pause'; choose another"),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_a_bad_profile_names_the_file_and_the_field(case, tmp_path, capsys):
    text, message = BAD_PROFILES[case]
    (tmp_path / "bad.toml").write_text(text)
    out = tmp_path / "x.zarr"
    assert record_main(["screen", "--controls", str(tmp_path / "bad.toml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    assert not out.exists()


def test_missing_profile_and_bad_options(tmp_path, capsys):
    assert record_main(["screen", "--controls", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "x.zarr")]) == 2
    assert "nope.toml: no such control profile" in capsys.readouterr().err
    for args, message in ((["--region", "1,2,3"], "--region: .*expected X,Y,WIDTH,HEIGHT"),
                          (["--region", "0,0,0,10"], "--region: .*must be positive"),
                          (["--size", "big"], "--size: .*WIDTHxHEIGHT"),
                          (["--region", "0,0,5,5", "--monitor", "1"], "not allowed with argument")):
        with pytest.raises(SystemExit) as e:
            record_main(["screen", "--out", str(tmp_path / "x.zarr"), *args])
        assert e.value.code == 2
        assert re.search(message, capsys.readouterr().err)
    assert record_main(["screen", "--out", str(tmp_path / "x.zarr"), "--fps", "0"]) == 2
    assert "--fps must be in (0, 240]" in capsys.readouterr().err


def test_no_display_is_a_clear_error(monkeypatch, tmp_path, capsys):
    if not sys.platform.startswith("linux"):
        pytest.skip("DISPLAY is X11's")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert record_main(["screen", "--out", str(tmp_path / "x.zarr")]) == 2
    err = capsys.readouterr().err
    assert "error: cannot capture the screen (DISPLAY is not set)" in err and "Traceback" not in err
    assert not (tmp_path / "x.zarr").exists()


def test_region_off_screen_and_missing_window_are_clear_errors(xvfb, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DISPLAY", xvfb.display)
    out = tmp_path / "x.zarr"
    assert record_main(["screen", "--out", str(out), "--region", "600,0,100,100"]) == 2
    assert "--region 600,0,100,100: extends past the screen (640x480 at 0,0)" in capsys.readouterr().err
    assert record_main(["screen", "--out", str(out), "--window", "no such game"]) == 2
    assert "--window 'no such game': no window's title or class contains it" in capsys.readouterr().err
    assert record_main(["screen", "--out", str(out), "--monitor", "5"]) == 2
    assert "--monitor 5: this screen has 1 monitor(s)" in capsys.readouterr().err
    assert not out.exists()


def test_check_sources_rejects_an_exclusive_spec():
    spec = ControlSpec((Control("a", source="key:a"), Control("b", source="key:b")), exclusive=True)
    with pytest.raises(ValueError, match="p.toml: exclusive = true is for game action spaces"):
        check_sources(spec, "p.toml")
