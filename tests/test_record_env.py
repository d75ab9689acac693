"""Recording real Atari games (ale-py ships the ROMs) with the bots and with the keyboard."""


import cv2
import gymnasium as gym
import numpy as np
import pytest

from conftest import run_cli
from dreamcade.dataset import open_store
from dreamcade.record.gym_game import EnvRecording, Recorder
from dreamcade.record.policies import CarefulPolicy, KeyboardPolicy, StickyPolicy, meaning_parts, parse_keymap


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


def replay_frames(env_id, seed, size, actions, starts):
    """The frames a fresh game gives for the stored actions (resets where the store has an episode
    start), resized as the recorder does."""
    import ale_py
    gym.register_envs(ale_py)
    env = gym.make(env_id, frameskip=4, repeat_action_probability=0.0)
    small = lambda o: cv2.resize(o, size, interpolation=cv2.INTER_AREA)
    obs, _ = env.reset(seed=seed)
    out = [small(obs)]
    for t in range(len(actions) - 1):
        if t + 1 in starts:
            obs, _ = env.reset()
        else:
            obs, *_ = env.step(int(actions[t]))
        out.append(small(obs))
    env.close()
    return np.stack(out)


def test_careful_bot_loses_fewer_lives_on_river_raid_and_a_replay_reproduces_it(tmp_path):
    """River Raid counts a death 45 frames after the crash: the sticky bot crashes every few dozen
    frames and restarts the game; the careful bot, looking 60 frames ahead, flies on."""
    stores = {}
    for policy in ("sticky", "careful"):
        out = tmp_path / f"{policy}.zarr"
        run_cli("-m", "dreamcade", "record", "env", "--env", "ALE/Riverraid-v5", "--policy", policy,
                "--steps", "900", "--max-hold", "8", "--size", "40x52", "--seed", "0", "--quiet",
                "--out", str(out))
        stores[policy] = open_store(out)
    careful = stores["careful"]
    assert careful.attrs["source"]["policy"] == "careful" and careful.attrs["source"]["lookahead"] == 60
    # a game over (4 lives) ends an episode; a death holds the picture still for a while
    games = {p: len(s.episode_starts) for p, s in stores.items()}
    still = {p: float((np.abs(np.diff(s.read_frames().astype(int), axis=0)).sum(axis=(1, 2, 3)) == 0).mean())
             for p, s in stores.items()}
    assert games["sticky"] >= 2 and games["careful"] == 1, games
    assert still["careful"] < still["sticky"] / 2, still
    # the bot still plays every kind of action, not one safe one
    idx = careful.read_actions().argmax(axis=1)
    assert len(np.unique(idx)) >= 16 and np.bincount(idx).max() < 0.2 * len(idx)
    # the look ahead leaves no trace in the game: a replay of the stored actions gives every frame
    frames = careful.read_frames()
    np.testing.assert_array_equal(replay_frames("ALE/Riverraid-v5", 0, (40, 52), idx, set(careful.episode_starts)),
                                  frames)


def test_careful_bot_needs_an_atari_game_and_bots_need_a_hold_and_a_look_ahead(tmp_path):
    cases = [(["--env", "CartPole-v1", "--policy", "careful"], ["--policy careful", "--policy sticky"]),
             (["--env", "ALE/Riverraid-v5", "--policy", "careful", "--lookahead", "0"], ["--lookahead", "got 0"]),
             (["--env", "ALE/Pong-v5", "--policy", "sticky", "--max-hold", "0"], ["--max-hold", "got 0"])]
    for args, said in cases:
        proc = run_cli("-m", "dreamcade", "record", "env", *args, "--steps", "10", "--out", str(tmp_path / "c.zarr"),
                       check=False)
        assert proc.returncode == 2 and all(s in proc.stderr for s in said), (args, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert not (tmp_path / "c.zarr").exists()


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


def test_careful_policy_redraws_a_hold_that_loses_a_life():
    """A game where holding action 3 for any frame is fatal: the careful bot never plays it, and
    each look ahead covers the hold, then the idle action, up to the look ahead."""
    plans = []

    def survives(plan):
        plans.append(list(plan))
        return 3 not in plan

    p = CarefulPolicy(gym.spaces.Discrete(6), survives, seed=2, max_hold=5, lookahead=8, tries=50, idle=0)
    seq = [p.act(None) for _ in range(600)]
    assert 3 not in seq and set(seq) == {0, 1, 2, 4, 5}
    assert any(3 in plan for plan in plans), "some draws were fatal and drawn again"
    assert all(len(plan) == 8 for plan in plans)
    assert all(plan[-1] == 0 and len(set(plan[:-1])) <= 2 for plan in plans)
    with pytest.raises(ValueError, match="lookahead"):
        CarefulPolicy(gym.spaces.Discrete(6), survives, lookahead=0)


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


