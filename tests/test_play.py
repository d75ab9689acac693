"""play.py: the real-time window, headless (SDL's dummy driver, posted events, a virtual gamepad)
and under Xvfb with xdotool; the saved session store; the hotkeys; the real game beside the
model; clear messages for checkpoints, data and control specs that do not fit.

Every loop turn reads the events, cuts one action row and generates one frame, so a test that
posts events before turn i knows exactly which stored action row they must land in.
"""

import re
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import pygame
import pytest
import torch

from conftest import ROOT, run_cli
from dreamcade.dataset import Control, ControlSpec, StoreWriter, open_store
from dreamcade.dataset.__main__ import main as dataset_main
from dreamcade.eval.health import sharpness
from dreamcade.files.checkpoint import load_model, save_model
from dreamcade.model.denoiser import Denoiser
import dreamcade.play.__main__ as cli  # the entry point: parse_args, build, main
from dreamcade.play.health_meter import Health
from dreamcade.play.live import LiveInput
from dreamcade.play.window import Player



NOOP, LEFT, RIGHT, UP, DOWN = range(5)  # the block game's actions
L = 2  # the tiny preset's context
DEVICE_SPEC = ControlSpec((
    Control("left", source="key:left"), Control("r", source="key:r"), Control("fire", source="mouse:left"),
    Control("dx", "continuous", "mouse:dx", -50.0, 50.0), Control("dy", "continuous", "mouse:dy", -50.0, 50.0),
    Control("a", source="pad:button:a"), Control("lx", "continuous", "pad:axis:leftx"),
    Control("rt", "continuous", "pad:axis:righttrigger", 0.0, 1.0), Control("hat_y", "continuous", "pad:hat:0:y"),
), name="device test")


@pytest.fixture(autouse=True)
def headless(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    monkeypatch.setenv("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")


def train_tiny(data, out, steps: int) -> str:
    run_cli("train.py", "--config", "configs/tiny.yaml", "--data", str(data), f"out_dir={out}",
            f"train.steps={steps}", "train.sample_every=0", "train.eval_every=1000", "--quiet")
    return str(out / "tiny")


@pytest.fixture(scope="module")
def block_run(tmp_path_factory):
    """A tiny checkpoint of the block game (16x16 frames, NOOP/LEFT/RIGHT/UP/DOWN)."""
    tmp = tmp_path_factory.mktemp("block")
    data = tmp / "block.zarr"
    run_cli("-m", "dreamcade", "record", "env", "--env", "dreamcade/Block-v0", "--frameskip", "1", "--steps", "400",
            "--quiet", "--out", str(data))
    return train_tiny(data, tmp, 4), data


@pytest.fixture(scope="module")
def device_run(tmp_path_factory):
    """A tiny checkpoint of a keys + mouse + gamepad spec (3 episodes of a made-up game)."""
    tmp = tmp_path_factory.mktemp("device")
    data = tmp / "device.zarr"
    rng = np.random.default_rng(0)
    with StoreWriter(data, spec=DEVICE_SPEC, fps=20, frame_size=(16, 16), source={"kind": "test"}) as w:
        for t in range(60):
            if t % 20 == 0:
                w.begin_episode()
            w.append(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8), np.zeros(len(DEVICE_SPEC)), t / 20)
    return train_tiny(data, tmp, 2), data


@pytest.fixture
def pad():
    from virtual_gamepad import VirtualGamepad

    made = []
    yield lambda: made.append(VirtualGamepad()) or made[-1]
    for p in made:
        p.detach()


def player(*args: str) -> Player:
    return cli.build(cli.parse_args([*args, "--fps", "0", "--threads", "1", "--seed", "3"]))


def key(name: str, down: bool = True) -> None:
    pygame.event.post(pygame.event.Event(pygame.KEYDOWN if down else pygame.KEYUP, key=pygame.key.key_code(name)))


def tap(name: str) -> None:
    key(name)
    key(name, False)


def drive(p: Player, script: dict, frames: int | None = None) -> int:
    """Run the loop; script[i]() is called before loop turn i (events it posts land in turn i)."""
    try:
        return p.run(frames, lambda i: script[i]() if i in script else None)
    finally:
        p.close()


# -- headless: the saved session holds exactly the injected input ---------------------------------

def test_keys_and_gamepad_drive_a_discrete_game_and_the_session_stores_them_frame_by_frame(block_run, pad, tmp_path):
    run, data = block_run
    vp = pad()
    out = tmp_path / "session.zarr"
    script = {
        1: lambda: key("right"), 3: lambda: key("right", False),  # held 1-2, released during 3: still RIGHT
        5: lambda: tap("left"),  # a tap inside one frame counts for that frame
        7: lambda: vp.button("dpdown", True), 8: lambda: vp.button("dpdown", False),
        10: lambda: vp.axis("lefty", 0.9), 11: lambda: (vp.axis("lefty", 0.0), vp.axis("leftx", -0.8)),
        12: lambda: (vp.axis("leftx", 0.0), tap("x"), tap("q")),  # keys the game does not read
        13: lambda: vp.hat(0, 1), 14: lambda: vp.hat(0, 0),
        15: lambda: key("w"), 17: lambda: key("w", False),
    }
    want = [NOOP, RIGHT, RIGHT, RIGHT, NOOP, LEFT, NOOP, DOWN, DOWN, NOOP, DOWN, LEFT, NOOP, UP, NOOP, UP, UP, UP, NOOP]
    n = len(want)
    p = player("--checkpoint", run, "--save", str(out), "--save-dir", str(tmp_path))
    assert p.live.pad.name == "Virtual Controller"
    assert drive(p, script, n) == n

    s = open_store(out)
    assert s.spec == open_store(data).spec and s.closed_cleanly
    assert len(s) == L + n, "the context frames, then one frame per generated frame"
    actions = s.read_actions()
    assert (actions.sum(axis=1) == 1).all(), "every row one-hot"
    assert list(actions[L - 1:L - 1 + n].argmax(axis=1)) == want
    assert actions[-1].argmax() == NOOP, "nothing ran after the last frame"
    src = s.attrs["source"]
    assert src["kind"] == "play" and src["context"] == L and src["checkpoint"] == run
    start = src["context_from"]["frame"]
    real = open_store(src["context_from"]["store"]).read_frames(start, start + L)
    np.testing.assert_array_equal(s.read_frames(0, L), real, "the session starts from the real context")
    assert (np.diff(s.time) > 0).all()
    assert dataset_main(["info", str(out)]) == 0


def test_keys_mouse_and_gamepad_of_a_recorded_spec_land_in_their_columns(device_run, pad, tmp_path, capsys):
    run, _ = device_run
    vp = pad()
    out = tmp_path / "session.zarr"

    def motion(dx, dy):
        pygame.event.post(pygame.event.Event(pygame.MOUSEMOTION, rel=(dx, dy), pos=(5, 5), buttons=(0, 0, 0)))

    def click():
        for t in (pygame.MOUSEBUTTONDOWN, pygame.MOUSEBUTTONUP):
            pygame.event.post(pygame.event.Event(t, button=1, pos=(5, 5)))

    script = {
        1: lambda: (key("left"), motion(3, -2), motion(4, 1)),
        2: lambda: (key("left", False), key("r")),  # the spec reads r: it is not the reset hotkey here
        3: lambda: (key("r", False), click(), tap("z")),
        4: lambda: (vp.button("a", True), vp.axis("leftx", -0.5), vp.axis("righttrigger", 0.75)),
        5: lambda: (vp.button("a", False), vp.hat(0, 1)),
        6: lambda: (vp.axis("leftx", 0.0), vp.axis("righttrigger", 0.0), vp.hat(0, 0), tap("f2")),  # F2 resets
    }
    #          left r  fire dx  dy   a  lx    rt    hat_y
    want = [[0, 0, 0, 0, 0, 0, 0, 0, 0],
            [1, 0, 0, 7, -1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0, 0, 0, 0],
            [0, 1, 1, 0, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 1, -0.5, 0.75, 0],
            [0, 0, 0, 0, 0, 1, -0.5, 0.75, 1],
            [0, 0, 0, 0, 0, 0, 0, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 0, 0]]
    n = len(want)
    p = player("--checkpoint", run, "--save", str(out), "--save-dir", str(tmp_path))
    assert drive(p, script, n) == n
    assert "the model reads key 'r', so it is not the reset hotkey here; use f2" in capsys.readouterr().err

    s = open_store(out)
    assert [len(e) for e in s.episodes()] == [L + 6, L + n - 6], "F2 started a new episode, from real frames"
    actions = s.read_actions()
    first, second = actions[L - 1:L + 5], actions[2 * L + 5:2 * L + 5 + n - 6]
    np.testing.assert_allclose(np.concatenate([first, second]), want, atol=1e-3)
    ev = s.read_events()
    names = [s.spec.names[c] for c in ev["control"]]
    assert names[:5] == ["left", "dx", "dy", "dx", "dy"] and "a" in names and "hat_y" in names
    assert (np.diff(s.time) > 0).all()
    assert dataset_main(["info", str(out)]) == 0


def test_live_input_holds_taps_and_ignores_what_the_spec_does_not_read():
    spec = ControlSpec((Control("jump", source="key:space"), Control("dx", "continuous", "mouse:dx", -9, 9)))
    pygame.display.init()
    try:
        live = LiveInput(spec)
        other = live.feed([pygame.event.Event(pygame.KEYDOWN, key=pygame.K_SPACE),
                           pygame.event.Event(pygame.KEYUP, key=pygame.K_SPACE),
                           pygame.event.Event(pygame.KEYDOWN, key=pygame.K_q),
                           pygame.event.Event(pygame.MOUSEBUTTONDOWN, button=1, pos=(0, 0)),
                           pygame.event.Event(pygame.MOUSEMOTION, rel=(2, 5), pos=(0, 0), buttons=(0, 0, 0))])
        assert other == ["q"], "keys the spec does not read are handed back for the hotkeys"
        np.testing.assert_array_equal(live.action(), [1, 2])
        np.testing.assert_array_equal(live.action(), [0, 0])
        assert live.pad is None and live.mouse_motion
    finally:
        pygame.display.quit()


# -- hotkeys, the HUD, the real game --------------------------------------------------------------

def test_hotkeys_steps_noise_pause_single_step_save_view_hud_and_screenshot(block_run, tmp_path):
    run, _ = block_run
    p = player("--checkpoint", run, "--save-dir", str(tmp_path), "--scale", "4", "--method", "heun")
    assert p.env.sampler.method == "heun" and "steps 2 heun" in p.hud_lines()[0][0], "--method over the run's euler"
    seen = {}

    def note(name):
        seen[name] = (p.env.sampler.steps, p.env.sampler.context_noise, p.frames_done, p.screen.get_size())

    script = {
        0: lambda: [tap("]") for _ in range(12)], 1: lambda: note("steps up"),
        2: lambda: [tap("[") for _ in range(12)], 3: lambda: note("steps down"),
        4: lambda: [tap("=") for _ in range(30)], 5: lambda: note("noise up"),
        6: lambda: [tap("-") for _ in range(30)], 7: lambda: note("noise down"),
        8: lambda: tap("p"), 9: lambda: note("paused"), 12: lambda: (note("still paused"), tap("n")),
        13: lambda: (note("one step"), tap("p"), tap("f9")), 16: lambda: tap("f9"),
        17: lambda: (tap("tab"), tap("v")), 18: lambda: note("hud off, model only"), 19: lambda: tap("v"),
        20: lambda: note("real only"), 21: lambda: (tap("h"), tap("f12")), 22: lambda: tap("escape"),
    }
    done = drive(p, script)
    assert done == 22 - 4, "turns 8-11 were paused (turn 12 stepped once), Esc quit before turn 22's frame"
    assert seen["steps up"][0] == 10 and seen["steps down"][0] == 1
    assert seen["noise up"][1] == pytest.approx(p.env.model.diffusion.context_noise_max) and seen["noise down"][1] == 0
    assert seen["paused"][2] == seen["still paused"][2] == 8 and seen["one step"][2] == 9
    assert seen["hud off, model only"][3] == (16 * 4, 16 * 4)
    assert seen["real only"][3] == (16 * 4, 16 * 4)
    sessions = list(tmp_path.glob("*.zarr"))
    assert len(sessions) == 1 and len(open_store(sessions[0])) == L + 3, "F9 saved the 3 frames between"
    shots = list(tmp_path.glob("*.png"))
    assert len(shots) == 1 and pygame.image.load(str(shots[0])).get_size() == (64, 64)


def test_the_real_game_runs_beside_the_model_on_the_same_input(block_run, tmp_path):
    run, _ = block_run
    p = player("--checkpoint", run, "--save-dir", str(tmp_path))
    assert p.real is not None and [name for name, _ in p.panels()] == ["model", "real game"]
    x0 = np.argwhere(p.real_frame[..., 0] > 200)[:, 1].min()
    drive(p, {0: lambda: key("left"), 1: lambda: key("left", False)}, 1)
    x1 = np.argwhere(p.real_frame[..., 0] > 200)[:, 1].min()
    assert x1 == max(0, x0 - 2), "the real block moved left by the game's speed"
    assert cli.main(["--checkpoint", run, "--no-real", "--frames", "1", "--save-dir", str(tmp_path)]) == 0


def test_a_model_trained_with_action_drop_plays_with_guidance_and_the_session_says_so(block_run, tmp_path):
    _, data = block_run
    run_cli("train.py", "--config", "configs/tiny.yaml", "--data", str(data), f"out_dir={tmp_path}", "name=dropped",
            "train.steps=4", "diffusion.action_drop=0.5", "train.sample_every=0", "train.eval_every=1000", "--quiet")
    session = tmp_path / "guided.zarr"
    assert cli.main(["--checkpoint", str(tmp_path / "dropped"), "--no-real", "--frames", "2", "--guidance", "2",
                     "--guidance-rescale", "0.7", "--save", str(session), "--save-dir", str(tmp_path)]) == 0
    s = open_store(session)
    assert s.attrs["source"]["sampler"]["guidance"] == 2 and s.closed_cleanly
    assert s.attrs["source"]["sampler"]["guidance_rescale"] == 0.7


def test_no_real_game_beside_a_screen_recording_and_the_message_says_why(tmp_path, capsys):
    from dreamcade.play.real_game import RealGame

    spec = ControlSpec((Control("left", source="key:left"), Control("jump", source="key:space")), name="keys")
    raw = tmp_path / "raw.zarr"
    with StoreWriter(raw, spec=spec, fps=30, frame_size=(16, 16), source={
            "kind": "screen", "window": "SuperTux", "window_class": "supertux2", "region": [0, 0, 640, 480]}) as w:
        for t in range(40):
            w.append(np.full((16, 16, 3), t, np.uint8), np.zeros(2, np.float32), t / 30)
    assert dataset_main(["build", str(raw), "--out", str(tmp_path / "train.zarr"), "--size", "16x16", "--fps", "15",
                         "--quiet"]) == 0
    assert "20 frames in 1 episode at 16x16" in capsys.readouterr().out
    for path in (raw, tmp_path / "train.zarr"):  # the recording, and the training store built from it
        real, why = RealGame.find(open_store(path), spec, (16, 16))
        assert real is None and why == ("no real game to show beside the model: it runs only for gymnasium "
                                        "recordings, and this model's data was recorded from the screen (SuperTux)")


def test_health_figure_is_one_on_real_frames_and_warns_on_blur_and_noise():
    rng = np.random.default_rng(0)
    real = np.kron(rng.integers(0, 256, (8, 4, 4, 3), dtype=np.uint8), np.ones((1, 4, 4, 1), np.uint8))  # blocks
    h = Health(real, window=1)
    assert h.update(real[0]) == pytest.approx(sharpness(real[:1])[0] / h.reference) and h.warning is None
    h.update(np.full((16, 16, 3), 128, np.uint8))
    assert h.value == 0 and "blurring" in h.warning
    h.update(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8))  # noise in every pixel
    assert h.value > 2 and "noise" in h.warning
    # a world that stops moving is not healthy either, however sharp its frames
    from test_eval_metrics import block_game_frames
    real = block_game_frames(0, 256)
    h = Health(real, window=30)
    for frame in block_game_frames(1, 30):
        h.update(frame)
    assert h.warning is None
    for _ in range(30):
        h.update(frame)
    assert 0.5 < h.value < 2 and "frozen" in h.warning


PALETTE = np.array([[20, 24, 80], [210, 120, 40]], np.uint8)


def scrolling_game(n: int, seed: int, size: int = 32) -> np.ndarray:
    """n frames of a busy game: a two-colour dither scrolling a pixel a frame. It is as sharp as
    noise and moves two thirds as much, so only its colours tell it from noise."""
    tex = np.random.default_rng(seed).integers(0, 2, (size, 4 * size))
    return np.stack([PALETTE[np.roll(tex, -t, 1)[:, :size]] for t in range(n)])


def test_the_hud_band_comes_from_across_the_reference_and_ignores_a_fade_at_its_start(tmp_path):
    """A reference whose first 256 frames are a death fade (to black in 128 frames, then black),
    then three episodes of the game: the HUD's band is built from runs spread over all of it and
    leaves the fade out, so pure noise reads red (its colours) and real frames do not. Built from
    the first 256 frames (before), the colour ceiling was 0.42 and noise passed; from frames
    spread evenly but with the fade kept in, 0.59, and noise passed too."""
    from dreamcade.play.contexts import Contexts
    fade = scrolling_game(256, 0) * np.clip(1 - np.arange(256) / 128, 0, 1)[:, None, None, None]
    episodes = [fade.round().astype(np.uint8)] + [scrolling_game(700, s) for s in (1, 2, 3)]
    spec = ControlSpec((Control("left"), Control("right")), name="hud test")
    with StoreWriter(tmp_path / "ref.zarr", spec=spec, fps=30, frame_size=(32, 32), source={"kind": "test"}) as w:
        for ep in episodes:
            w.begin_episode()
            for t, f in enumerate(ep):
                w.append(f, np.zeros(2, np.float32), t / 30)
    runs = Contexts.load(str(tmp_path / "ref.zarr"), spec, L, [], 0.1, 0).sample_frames()
    h = Health(runs)
    for frame in np.random.default_rng(9).integers(0, 256, (30, 32, 32, 3), dtype=np.uint8):
        h.update(frame)
    assert h.warning, f"pure noise reads unhealthy (here by its colours alone); band {h.band.summary()}"
    assert h.band.left_out > 0 and h.band.high["colour_distance"] < 0.2, h.band.summary()
    h.reset()
    for frame in scrolling_game(60, 7):
        h.update(frame)
        assert h.warning is None, "real frames read healthy"
    assert 0.9 < h.value < 1.1, "the sharpness figure of real frames is about 1"


# -- under Xvfb: the real window, keys from xdotool -----------------------------------------------

@pytest.fixture(scope="module")
def xvfb():
    for tool, pkg in (("Xvfb", "xvfb"), ("xdotool", "xdotool"), ("import", "imagemagick")):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (Debian: apt-get install {pkg})")
    from dreamcade.record.xvfb import Xvfb

    with Xvfb(640, 480) as x:
        yield x


@pytest.mark.slow
def test_the_window_under_x11_shows_the_generated_frame_and_takes_xdotool_keys(xvfb, block_run, tmp_path):
    run, _ = block_run
    out, scale = tmp_path / "session.zarr", 8
    env = {**xvfb.env(), "SDL_VIDEODRIVER": "x11", "SDL_VIDEO_WINDOW_POS": "0,0", "SDL_AUDIODRIVER": "dummy",
           "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "play.py", "--checkpoint", run, "--save", str(out), "--fps", "10",
                             "--scale", str(scale), "--threads", "1", "--save-dir", str(tmp_path)],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    xdo = lambda *a: subprocess.run(["xdotool", *a], env=env, check=True, timeout=10)
    try:
        deadline = time.monotonic() + 120
        while not any("window ready" in x for x in lines):
            assert proc.poll() is None and time.monotonic() < deadline, f"no window: {''.join(lines)}"
            time.sleep(0.05)
        wid = re.search(r"X11 window (0x[0-9a-f]+)", "".join(lines)).group(1)
        xdo("mousemove", "20", "20")  # no window manager: the keys go to the window under the pointer
        xdo("windowfocus", wid)
        time.sleep(1.0)
        xdo("keydown", "Right")
        time.sleep(1.5)
        xdo("keyup", "Right")
        xdo("key", "p")  # pause: the window keeps showing the last generated frame
        shot, before = tmp_path / "root.png", None
        for _ in range(20):  # until two captures agree: the pause has taken effect
            time.sleep(0.5)
            subprocess.run(["import", "-window", "root", str(shot)], env=env, check=True, timeout=20)
            now = pygame.surfarray.array3d(pygame.image.load(str(shot)))
            if before is not None and np.array_equal(now, before):
                break
            before = now
        xdo("key", "F12")
        time.sleep(1.0)
        xdo("key", "Escape")
        assert proc.wait(timeout=60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()

    s = open_store(out)
    actions = s.read_actions()
    assert (actions[:, RIGHT] == 1).any() and (actions.sum(axis=1) == 1).all(), "xdotool's Right reached the model"
    screen = pygame.surfarray.array3d(pygame.image.load(str(shot))).transpose(1, 0, 2)
    panel = screen[:16 * scale, :16 * scale]
    last = s.read_frames(len(s) - 1, len(s))[0]
    assert panel.max() > 20, "the frame area is black"
    np.testing.assert_array_equal(panel, np.kron(last, np.ones((scale, scale, 1), np.uint8)),
                                  "the window shows the last generated frame, scaled")
    real_panel = screen[:16 * scale, 16 * scale + 4:32 * scale + 4]
    assert real_panel.max() > 20, "the real game is drawn beside the model"
    hud = screen[16 * scale:16 * scale + 40, :300]
    assert (hud > 150).any(), "the HUD is drawn under the frames"
    window_shot = next(tmp_path.glob("tiny-*.png"))
    own = pygame.surfarray.array3d(pygame.image.load(str(window_shot))).transpose(1, 0, 2)
    np.testing.assert_array_equal(own[:16 * scale, :16 * scale], panel)


# -- what does not fit: clear messages, never a traceback -----------------------------------------

def test_missing_checkpoint_and_bad_data_are_clear_errors(block_run, device_run, tmp_path, capsys):
    run, data = block_run

    def error(*args: str) -> str:
        assert cli.main([*args, "--frames", "1", "--save-dir", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "Traceback" not in err
        return err

    assert "no such checkpoint" in error("--checkpoint", str(tmp_path / "runs/nothing"))
    assert f"{tmp_path}: not a store" in error("--checkpoint", run, "--data", str(tmp_path))
    assert "differs" in error("--checkpoint", run, "--data", str(device_run[1]))
    big = tmp_path / "big.zarr"
    with StoreWriter(big, spec=open_store(data).spec, fps=15, frame_size=(32, 32), source={}) as w:
        for t in range(4):
            w.append(np.zeros((32, 32, 3), np.uint8), np.eye(5)[0], t)
    assert "--size 16x16" in error("--checkpoint", run, "--data", str(big))
    assert "--episode 99" in error("--checkpoint", run, "--episode", "99")
    assert "--guidance 2: guidance needs a model trained with diffusion.action_drop" in error(
        "--checkpoint", run, "--guidance", "2")
    with pytest.raises(SystemExit) as stop:  # refused with the other options, before the model loads
        cli.main(["--checkpoint", run, "--steps", "11"])
    assert stop.value.code == 2 and "--steps 11: sampler steps must be between 1 and 10" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["--checkpoint", run, "--guidance-rescale", "-0.5"])
    assert stop.value.code == 2 and "--guidance-rescale -0.5: the share" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["--checkpoint", run, "--hold-levels", "-1"])
    assert stop.value.code == 2 and "--hold-levels -1: must be 0 (off) or more" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["--checkpoint", run, "--method", "rk4"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--method 'rk4': the sampler method must be one of euler, heun" in err
    assert "already exists" in error("--checkpoint", run, "--save", str(data))
    if not torch.cuda.is_available():
        assert "no CUDA GPU" in error("--checkpoint", run, "--device", "cuda")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("SDL_VIDEODRIVER")
        mp.delenv("DISPLAY", raising=False)
        mp.delenv("WAYLAND_DISPLAY", raising=False)
        assert "no display to open the window on" in error("--checkpoint", run)
    moved = tmp_path / "moved"  # a checkpoint whose training data is elsewhere
    model, cfg, _ = load_model(run)
    cfg.data.stores = [str(tmp_path / "gone.zarr")]
    save_model(moved, model, cfg, 4)
    assert "pass --data STORE" in error("--checkpoint", str(moved))
    assert cli.main(["--checkpoint", str(moved), "--data", str(data), "--frames", "1",
                      "--save-dir", str(tmp_path)]) == 0
    # the model knows its own frame size: with its training data gone, a store of another size is
    # still refused, not played (a model that records no size let it through)
    capsys.readouterr()
    assert "--size 16x16" in error("--checkpoint", str(moved), "--data", str(big))


def test_a_spec_the_devices_cannot_fully_drive_plays_with_a_clear_message(block_run, device_run, tmp_path, capsys):
    run = device_run[0]  # needs a gamepad, and none is connected
    assert cli.main(["--checkpoint", run, "--frames", "2", "--save-dir", str(tmp_path)]) == 0
    assert "the model reads a gamepad but none is connected: plug one in" in capsys.readouterr().err

    _, cfg, _ = load_model(block_run[0])
    for spec, says in (
            (ControlSpec((Control("axis_0", "continuous", "", -1, 1), Control("jump", source="key:space"))),
             "no keyboard, mouse or gamepad input drives axis_0 (source '')"),
            (ControlSpec(tuple(Control(f"action_{i}") for i in range(3)), exclusive=True), "pass --keys")):
        folder = tmp_path / spec.names[0]
        folder.mkdir()
        save_model(folder, Denoiser.build(cfg.model, cfg.diffusion, spec, L, (16, 16)), cfg, 0)
        store = folder / "data.zarr"
        with StoreWriter(store, spec=spec, fps=15, frame_size=(16, 16), source={}) as w:
            for t in range(4):
                w.append(np.full((16, 16, 3), 60 * t, np.uint8), spec.one_hot(0) if spec.exclusive else np.zeros(2), t)
        assert cli.main(["--checkpoint", str(folder), "--data", str(store), "--frames", "2",
                          "--save-dir", str(tmp_path)]) == 0
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err
    keyed = cli.build(cli.parse_args(["--checkpoint", str(tmp_path / "action_0"), "--data", str(store),
                                        "--keys", "left=0,right=2"]))
    keyed.close()
    assert keyed.live.playable
