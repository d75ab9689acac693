"""Record a gymnasium game (Atari through ale-py, whose ROMs ship with it) into a store."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import gymnasium as gym
import numpy as np
from tqdm import tqdm

from dreamcade.dataset.controls import CONTINUOUS, Control, ControlSpec
from dreamcade.dataset.errors import UserError
from dreamcade.dataset.outputs import Output
from dreamcade.dataset.store import StoreWriter
from dreamcade.record.policies import (CarefulPolicy, KeyboardPolicy, RandomPolicy, StickyPolicy, StopRecording,
                                       parse_keymap)

class EnvError(UserError, ValueError):
    """A game or policy that cannot be used; the message names the option and the fix."""


ATARI_HZ = 60.0  # the Atari 2600 emulator's native frame rate
POLICIES = ("random", "sticky", "careful", "keyboard")


@dataclass
class EnvRecording:
    """What `dreamcade record env` records; every field maps to a command-line option."""

    env_id: str = "ALE/Pong-v5"
    policy: str = "sticky"
    steps: int = 1000
    """Frames to record, over as many episodes as that takes."""
    out: str = "recording.zarr"
    frameskip: int = 4
    """Emulator frames per recorded frame (the action is repeated over them)."""
    size: tuple[int, int] | None = None
    """(width, height) to resize frames to (area interpolation); None keeps the game's size."""
    fps: float | None = None
    """Stored frame rate; default: the game's rate divided by frameskip (Atari: 60/4 = 15)."""
    repeat_action_probability: float = 0.0
    """ALE's sticky actions (0 here, so the recorded action is the one the game ran)."""
    max_hold: int = 16
    """Sticky and careful bots: the longest hold of one action, in frames."""
    lookahead: int = 60
    """Careful bot: frames each drawn hold is tried ahead on a copy of the game (then idle)."""
    keys: str = ""
    """Keyboard policy: KEY=ACTION pairs overriding the default arrows/WASD/space map."""
    seed: int = 0
    overwrite: bool = False
    env_kwargs: dict = field(default_factory=dict)


def make_env(rec: EnvRecording) -> tuple[gym.Env, bool]:
    """Build the env; returns it and whether frames come from env.render() (not observations)."""
    kwargs = dict(rec.env_kwargs)
    if rec.env_id.startswith("dreamcade/"):
        from dreamcade.record.games import register

        register()
    if rec.env_id.startswith("ALE/"):
        import ale_py

        gym.register_envs(ale_py)
        kwargs.setdefault("frameskip", rec.frameskip)
        kwargs.setdefault("repeat_action_probability", rec.repeat_action_probability)
    try:
        env = gym.make(rec.env_id, **kwargs)
    except gym.error.Error as e:
        raise EnvError(f"--env {rec.env_id}: cannot make this game: {e}") from None
    except ImportError as e:  # the module:Id form names a module that is not installed
        raise EnvError(f"--env {rec.env_id}: {e}; install the package that provides it, or check the "
                       "module name before the colon") from None
    if _is_image_space(env.observation_space):
        return env, False
    env.close()
    env = gym.make(rec.env_id, render_mode="rgb_array", **kwargs)
    return env, True


def _is_image_space(space) -> bool:
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
            and space.shape[2] == 3)


def action_meanings(env: gym.Env) -> list[str]:
    space = env.action_space
    get = getattr(env.unwrapped, "get_action_meanings", None)
    if isinstance(space, gym.spaces.Discrete):
        return list(get()) if get else [f"action_{i}" for i in range(space.n)]
    return []


def env_spec(env: gym.Env, env_id: str) -> ControlSpec:
    """The control spec of a game's action space: one-hot over discrete actions named by their
    meanings, binary for MultiBinary, continuous (with the space's bounds) for Box."""
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete):
        return ControlSpec(tuple(Control(m) for m in action_meanings(env)), exclusive=True, name=env_id)
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return ControlSpec(tuple(Control(f"button_{i}") for i in range(space.n)), name=env_id)
    if isinstance(space, gym.spaces.Box) and len(space.shape) == 1:
        lo, hi = np.broadcast_to(space.low, space.shape), np.broadcast_to(space.high, space.shape)
        if not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise EnvError(f"{env_id}: unbounded continuous actions cannot be stored")
        return ControlSpec(tuple(Control(f"axis_{i}", CONTINUOUS, "", float(lo[i]), float(hi[i]))
                                 for i in range(space.shape[0])), name=env_id)
    raise EnvError(f"{env_id}: action space {space} is not supported "
                     "(Discrete, MultiBinary or a 1-d Box)")


def encode_action(space, action) -> np.ndarray:
    if isinstance(space, gym.spaces.Discrete):
        row = np.zeros(space.n, np.float32)
        row[int(action) - space.start] = 1.0
        return row
    return np.asarray(action, np.float32).reshape(-1)


def idle_action(space):
    """What the last frame of an episode stores: it has no successor, so no action ran."""
    if isinstance(space, gym.spaces.Discrete):
        return space.start
    if isinstance(space, gym.spaces.Box):
        return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high)
    return np.zeros(space.shape, space.dtype)


def game_fps(env: gym.Env, rec: EnvRecording) -> float:
    if rec.fps:
        return float(rec.fps)
    if rec.env_id.startswith("ALE/"):
        return ATARI_HZ / rec.frameskip
    return float(env.metadata.get("render_fps") or 30) / rec.frameskip


def make_policy(rec: EnvRecording, env: gym.Env, fps: float):
    if rec.policy == "random":
        return RandomPolicy(env.action_space, rec.seed)
    if rec.policy in ("sticky", "careful") and rec.max_hold < 1:
        raise EnvError(f"--max-hold must be at least 1 frame, got {rec.max_hold}")
    if rec.policy == "sticky":
        return StickyPolicy(env.action_space, rec.seed, rec.max_hold)
    if rec.policy == "careful":
        if not rec.env_id.startswith("ALE/"):
            raise EnvError(f"--policy careful looks ahead in the Atari emulator; --env {rec.env_id} is not an "
                           "ALE/ game: use --policy sticky")
        if rec.lookahead < 1:
            raise EnvError(f"--lookahead must be at least 1 frame, got {rec.lookahead}")
        return CarefulPolicy(env.action_space, AleLookahead(env, rec.frameskip), rec.seed, rec.max_hold,
                             rec.lookahead, idle=idle_action(env.action_space))
    if rec.policy == "keyboard":
        meanings = action_meanings(env)
        if not meanings:
            raise EnvError("--policy keyboard needs a game with discrete actions")
        try:
            keymap = parse_keymap(rec.keys, meanings) if rec.keys else None
            return KeyboardPolicy(meanings, fps, keymap, title=f"dreamcade record: {rec.env_id}")
        except ValueError as e:
            raise EnvError(f"--keys: {e}") from None
    raise EnvError(f"unknown policy {rec.policy!r}; choose one of {POLICIES}")


class AleLookahead:
    """Plays actions ahead on the Atari emulator of a gymnasium ALE game and puts it back:
    `survives(plan)` for the careful bot. The emulator's state is cloned before the look ahead
    and restored after it, so the recording goes on as if it never ran (with ALE's sticky actions
    off, a replay of the stored actions gives every frame); gymnasium's step count is not
    touched."""

    def __init__(self, env: gym.Env, frameskip: int) -> None:
        self.ale = env.unwrapped.ale
        self.actions = env.unwrapped._action_set  # action index -> the emulator's action
        skip = getattr(env.unwrapped, "_frameskip", frameskip)  # an --env-kwarg frameskip=... wins
        self.frameskip = skip if isinstance(skip, int) else frameskip

    def __call__(self, plan) -> bool:
        ale = self.ale
        state, lives = ale.cloneState(), ale.lives()
        try:
            for a in plan:
                for _ in range(self.frameskip):
                    ale.act(self.actions[int(a)])
                if ale.lives() < lives or ale.game_over():
                    return False
            return True
        finally:
            ale.restoreState(state)


class Recorder:
    """Steps a game with a policy and writes every frame with the action taken on it."""

    def __init__(self, rec: EnvRecording, policy=None) -> None:
        self.rec = rec
        self.env, self.from_render = make_env(rec)
        self.spec = env_spec(self.env, rec.env_id)
        self.fps = game_fps(self.env, rec)
        self.policy = policy if policy is not None else make_policy(rec, self.env, self.fps)
        # non-ALE games get their frame skip here; ALE does it inside the emulator
        self.repeat = 1 if rec.env_id.startswith("ALE/") else rec.frameskip

    def raw(self, obs) -> np.ndarray:
        return np.asarray(self.env.render() if self.from_render else obs, np.uint8)

    def frame(self, obs) -> np.ndarray:
        img = self.raw(obs)
        if self.rec.size and (img.shape[1], img.shape[0]) != tuple(self.rec.size):
            img = cv2.resize(img, tuple(self.rec.size), interpolation=cv2.INTER_AREA)
        return img

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, term, trunc, _ = self.env.step(action)
            total += float(reward)
            if term or trunc:
                break
        return obs, total, term or trunc

    def run(self, progress: bool = True, output: Output | None = None) -> Path:
        """Record rec.steps frames to rec.out (through `output`, a store_output opened by the
        caller, when given)."""
        rec = self.rec
        obs, _ = self.env.reset(seed=rec.seed)
        capture = self.raw(obs).shape[1::-1]
        first = self.frame(obs)
        h, w = first.shape[:2]
        source = {"kind": "env", "env_id": rec.env_id, "policy": rec.policy, "frameskip": rec.frameskip,
                  "repeat_action_probability": rec.repeat_action_probability, "seed": rec.seed}
        if rec.policy == "careful":
            source["lookahead"] = rec.lookahead
        bar = tqdm(total=rec.steps, unit="frame", disable=not progress, dynamic_ncols=True)
        episodes, t0 = 1, time.monotonic()
        writer = StoreWriter(rec.out, spec=self.spec, fps=self.fps, frame_size=(w, h), source=source,
                             capture_size=capture, overwrite=rec.overwrite, output=output)
        try:
            frame, i = first, 0
            while i < rec.steps:
                try:
                    action = self.policy.act(frame)
                except StopRecording:
                    break
                writer.append(frame, encode_action(self.env.action_space, action), i / self.fps)
                i += 1
                obs, _, done = self.step(action)
                frame = self.frame(obs)
                if done and i < rec.steps:
                    # the final frame of the episode, then a fresh episode
                    writer.append(frame, encode_action(self.env.action_space, idle_action(self.env.action_space)),
                                  i / self.fps)
                    i += 1
                    obs, _ = self.env.reset()
                    frame = self.frame(obs)
                    writer.begin_episode()
                    episodes += 1
                bar.update(i - bar.n)
                if i % 64 == 0:
                    bar.set_postfix(fps=f"{i / (time.monotonic() - t0):.0f}", episodes=episodes)
        finally:
            writer.close()
            bar.close()
            self.env.close()
            if hasattr(self.policy, "close"):
                self.policy.close()
        return Path(rec.out)

