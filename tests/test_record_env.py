"""Recording real Atari games (ale-py ships the ROMs) with the bots and with the keyboard."""


import cv2
import gymnasium as gym
import numpy as np
import pytest

from conftest import run_cli
from dreamcade.dataset import open_store
from dreamcade.record.gym_game import EnvRecording, Recorder
from dreamcade.record.policies import KeyboardPolicy, StickyPolicy, meaning_parts, parse_keymap


def test_sticky_bot_records_breakout_and_a_replay_reproduces_every_frame(tmp_path):
    out = tmp_path / "breakout.zarr"
    proc = run_cli("-m", "dreamcade", "record", "env", "--env", "ALE/Breakout-v5", "--policy", "sticky",
                   "--steps", "600", "--size", "32x40", "--seed", "3", "--out", str(out))
    assert "wrote" in proc.stdout
    s = open_store(out)
    frames, actions = s.read_frames(), s.read_actions()
    assert frames.shape == (600, 40, 32, 3)
    assert s.fps == 15.0
    assert s.spec.exclusive and s.spec.names == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    assert s.attrs["source"]["policy"] == "sticky" and s.attrs["capture_size"] == [160, 210]
    assert s.closed_cleanly and s.verify() == []
    # valid one-hot rows, and the bot really holds actions for several frames
    assert set(actions.sum(axis=1)) == {1.0} and set(np.unique(actions)) == {0.0, 1.0}
    idx = actions.argmax(axis=1)
    changes = int((idx[1:] != idx[:-1]).sum())
    assert 600 / 16 / 2 < changes < 600 / 2
    assert (np.abs(np.diff(frames.astype(int), axis=0)).sum(axis=(1, 2, 3)) > 0).mean() > 0.5
    starts = list(s.episode_starts)
    assert starts[0] == 0 and len(starts) >= 2, "Breakout with a random bot ends episodes in ~200 frames"

    # replay the recorded actions in the same game: every frame and every reset must match
    import ale_py
    gym.register_envs(ale_py)
    env = gym.make("ALE/Breakout-v5", frameskip=4, repeat_action_probability=0.0)
    small = lambda o: cv2.resize(o, (32, 40), interpolation=cv2.INTER_AREA)
    obs, _ = env.reset(seed=3)
    t = 0
    while t < 599:
        np.testing.assert_array_equal(frames[t], small(obs), err_msg=f"frame {t}")
        obs, _, term, trunc, _ = env.step(int(idx[t]))
        t += 1
        if term or trunc:
            np.testing.assert_array_equal(frames[t], small(obs), err_msg=f"final frame {t}")
            assert idx[t] == 0, "the final frame of an episode stores action 0"
            assert t + 1 in starts, f"an episode ended at frame {t} but no start at {t + 1}"
            obs, _ = env.reset()
            t += 1
        else:
            assert t not in starts[1:], f"episode start at {t} without a reset"
    env.close()


def test_random_policy_and_info_on_pong(tmp_path):
    out = tmp_path / "pong.zarr"
    run_cli("-m", "dreamcade", "record", "env", "--env", "ALE/Pong-v5", "--policy", "random", "--steps", "200",
            "--frameskip", "2", "--size", "64x64", "--quiet", "--out", str(out))
    s = open_store(out)
    assert len(s) == 200 and s.fps == 30.0 and s.frame_shape == (64, 64, 3)
    assert s.spec.names == ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"]
    info = run_cli("-m", "dreamcade", "data", "info", str(out)).stdout
    assert "frames    200" in info and "exclusive (one-hot)" in info
    # recording again to the same place needs --overwrite
    proc = run_cli("-m", "dreamcade", "record", "env", "--steps", "10", "--out", str(out), check=False)
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_non_image_game_is_recorded_through_render(tmp_path):
    out = tmp_path / "cartpole.zarr"
    run_cli("-m", "dreamcade", "record", "env", "--env", "CartPole-v1", "--policy", "random", "--steps", "40",
            "--frameskip", "1", "--size", "48x32", "--quiet", "--out", str(out))
    s = open_store(out)
    assert s.frame_shape == (32, 48, 3) and s.spec.names == ["action_0", "action_1"]
    assert s.read_frames().std() > 0


def test_sticky_policy_holds_for_bounded_durations():
    space = gym.spaces.Discrete(6)
    p = StickyPolicy(space, seed=1, max_hold=5)
    draws = iter(range(10**6))
    p.space = type("Counter", (), {"sample": lambda self: next(draws)})()  # each draw is new
    seq = [p.act(None) for _ in range(400)]
    holds = np.bincount(seq)
    assert holds.min() >= 1 and holds[:-1].max() == 5  # the last hold may be cut short
    assert set(holds[:-1]) == {1, 2, 3, 4, 5}
    assert 2.5 < holds.mean() < 3.5  # uniform on 1..5


def test_meaning_parts_and_keymap():
    assert meaning_parts("UPRIGHTFIRE") == {"UP", "RIGHT", "FIRE"}
    assert meaning_parts("NOOP") == set()
    assert parse_keymap("left=0,right=1", ["a", "b"]) == {"left": 0, "right": 1}
    with pytest.raises(ValueError, match="out of range"):
        parse_keymap("left=5", ["a", "b"])
    with pytest.raises(ValueError, match="KEY=ACTION"):
        parse_keymap("left", ["a"])


def test_keyboard_policy_records_what_was_pressed(tmp_path, monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    import pygame

    rec = EnvRecording(env_id="ALE/Pong-v5", policy="keyboard", steps=40, fps=200.0,
                       out=str(tmp_path / "played.zarr"), size=(64, 64))
    recorder = Recorder(rec)
    policy = recorder.policy
    assert isinstance(policy, KeyboardPolicy)

    def key(kind, name):
        pygame.event.post(pygame.event.Event(kind, key=pygame.key.key_code(name)))

    # (frame index -> events posted during that frame's interval)
    script = {10: [(pygame.KEYDOWN, "right")], 20: [(pygame.KEYUP, "right")],
              25: [(pygame.KEYDOWN, "space"), (pygame.KEYUP, "space")],  # a tap within one frame
              30: [(pygame.KEYDOWN, "a"), (pygame.KEYDOWN, "space")],
              34: [(pygame.KEYUP, "a"), (pygame.KEYUP, "space")],
              36: [(pygame.KEYDOWN, "q")]}  # not in the key map: nothing
    real_act, frame_no = policy.act, [0]

    def act(frame):
        if policy.screen is None:
            policy._open(frame)
        for kind, name in script.get(frame_no[0], []):
            key(kind, name)
        frame_no[0] += 1
        return real_act(frame)

    policy.act = act
    recorder.run(progress=False)
    s = open_store(rec.out)
    names = [s.spec.names[i] for i in s.read_actions().argmax(axis=1)]
    expected = (["NOOP"] * 10 + ["RIGHT"] * 10 + ["NOOP"] * 5 + ["FIRE"] + ["NOOP"] * 4
                + ["LEFTFIRE"] * 4 + ["NOOP"] * 6)
    assert names == expected
    assert pygame.display.get_init() is False  # the window was closed at the end


def test_keyboard_policy_stops_on_escape(tmp_path, monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    import pygame

    rec = EnvRecording(env_id="ALE/Pong-v5", policy="keyboard", steps=100, fps=500.0,
                       out=str(tmp_path / "esc.zarr"))
    recorder = Recorder(rec)
    policy, real_act, n = recorder.policy, recorder.policy.act, [0]

    def act(frame):
        n[0] += 1
        if n[0] == 8:
            pygame.event.post(pygame.event.Event(pygame.KEYDOWN, key=pygame.K_ESCAPE))
        return real_act(frame)

    policy.act = act
    recorder.run(progress=False)
    s = open_store(rec.out)
    assert len(s) == 7 and s.closed_cleanly


