"""Small games of our own, registered with gymnasium as dreamcade/...: real environments for
tests and demos that need no ROM and whose rules are known exactly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ACTIONS = ("NOOP", "LEFT", "RIGHT", "UP", "DOWN")
MOVES = {0: (0, 0), 1: (-1, 0), 2: (1, 0), 3: (0, -1), 4: (0, 1)}  # (dx, dy) per action


class BlockGame(gym.Env):
    """A block on a plain field; LEFT/RIGHT/UP/DOWN move it `speed` pixels, walls stop it.
    Observations are RGB frames [size, size, 3]; an episode lasts `max_steps` steps."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}

    def __init__(self, size: int = 16, block: int = 4, speed: int = 2, max_steps: int = 100,
                 render_mode: str | None = None) -> None:
        self.size, self.block, self.speed, self.max_steps = size, block, speed, max_steps
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0, 255, (size, size, 3), np.uint8)
        self.action_space = gym.spaces.Discrete(len(ACTIONS))
        self.pos = np.zeros(2, int)
        self.t = 0

    def get_action_meanings(self) -> list[str]:
        return list(ACTIONS)

    def _obs(self) -> np.ndarray:
        f = np.full((self.size, self.size, 3), (30, 40, 60), np.uint8)
        x, y = self.pos
        f[y:y + self.block, x:x + self.block] = (250, 220, 40)
        return f

    def reset(self, *, seed: int | None = None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.integers(0, self.size - self.block + 1, 2)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        dx, dy = MOVES[int(action)]
        self.pos = np.clip(self.pos + self.speed * np.array([dx, dy]), 0, self.size - self.block)
        self.t += 1
        return self._obs(), 0.0, False, self.t >= self.max_steps, {}

    def render(self) -> np.ndarray:
        return self._obs()


def register() -> None:
    if "dreamcade/Block-v0" not in gym.registry:
        gym.register("dreamcade/Block-v0", entry_point=BlockGame)
