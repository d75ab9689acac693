"""Who plays a recorded gymnasium game: a uniform random bot, a sticky bot, or a person."""

from __future__ import annotations

import os
import re
import warnings

import numpy as np

# The parts an Atari action meaning is made of ("UPRIGHTFIRE" = UP + RIGHT + FIRE).
MEANING_PARTS = ("UP", "DOWN", "LEFT", "RIGHT", "FIRE")
# Default keys for each part: arrows or WASD to move, space or Z to fire.
DEFAULT_KEYS = {"up": "UP", "w": "UP", "down": "DOWN", "s": "DOWN", "left": "LEFT", "a": "LEFT",
                "right": "RIGHT", "d": "RIGHT", "space": "FIRE", "z": "FIRE"}


def key_code(name: str) -> int:
    """pygame's key code for a key name ("left", "space", "a"), with a clear error."""
    import pygame

    with warnings.catch_warnings():  # key_code works without pygame.init(), but warns
        warnings.simplefilter("ignore")
        try:
            return pygame.key.key_code(name)
        except ValueError:
            raise ValueError(f"unknown key name {name!r} (use pygame names: left, space, a, ...)") from None


class StopRecording(Exception):
    """The person closed the window or pressed Escape."""


class RandomPolicy:
    """A uniformly random action every frame."""

    def __init__(self, action_space, seed: int | None = None) -> None:
        self.space = action_space
        self.space.seed(seed)

    def act(self, frame: np.ndarray):
        return self.space.sample()


class StickyPolicy:
    """Holds a random action for a random number of frames (1 to max_hold), then draws anew:
    longer, more varied motion than uniform noise, so a world model sees what actions do."""

    def __init__(self, action_space, seed: int | None = None, max_hold: int = 16) -> None:
        if max_hold < 1:
            raise ValueError(f"max_hold must be at least 1, got {max_hold}")
        self.space, self.max_hold = action_space, max_hold
        self.space.seed(seed)
        self.rng = np.random.default_rng(seed)
        self.current, self.left = None, 0

    def act(self, frame: np.ndarray):
        if self.left == 0:
            self.current = self.space.sample()
            self.left = int(self.rng.integers(1, self.max_hold + 1))
        self.left -= 1
        return self.current


class CarefulPolicy(StickyPolicy):
    """The sticky bot with a look ahead: each hold it draws is first played on a copy of the game,
    then the idle action up to `lookahead` frames; a draw after which the game loses a life is
    drawn again (up to `tries` times, then the last draw stands). A game that shows a death for a
    while before it counts it (River Raid: 45 frames) needs a look ahead longer than that. Fewer
    deaths make longer stretches of play: the sticky bot records a game over and over from its
    start, and the still frames of its deaths.

    `survives(plan)`: whether the game keeps every life through the actions of `plan` played
    from now, leaving the game as it was."""

    def __init__(self, action_space, survives, seed: int | None = None, max_hold: int = 16,
                 lookahead: int = 60, tries: int = 16, idle=0) -> None:
        super().__init__(action_space, seed, max_hold)
        if lookahead < 1 or tries < 1:
            raise ValueError(f"lookahead and tries must be at least 1, got {lookahead} and {tries}")
        self.survives, self.lookahead, self.tries, self.idle = survives, lookahead, tries, idle

    def act(self, frame: np.ndarray):
        if self.left == 0:
            for _ in range(self.tries):
                self.current = self.space.sample()
                self.left = int(self.rng.integers(1, self.max_hold + 1))
                hold = min(self.left, self.lookahead)
                if self.survives([self.current] * hold + [self.idle] * (self.lookahead - hold)):
                    break
        self.left -= 1
        return self.current


def meaning_parts(meaning: str) -> frozenset[str]:
    """"UPRIGHTFIRE" -> {UP, RIGHT, FIRE}; "NOOP" -> {}."""
    return frozenset(re.findall("|".join(MEANING_PARTS), meaning.upper()))


def pick_action(parts: list[frozenset[str]], targets) -> int:
    """The discrete action for the held `targets` (meaning parts such as "UP", "FIRE", or action
    indices): an index wins; else the action whose meaning has exactly the held parts, else the
    one with the most of them and no other, else action 0. `parts[i]` = meaning_parts(meaning i)."""
    targets = list(targets)
    for t in targets:
        if isinstance(t, int):
            return t
    want = frozenset(targets)
    best, best_n = 0, 0
    for i, p in enumerate(parts):
        if p == want:
            return i
        if p <= want and len(p) > best_n:
            best, best_n = i, len(p)
    return best


def parse_keymap(text: str, meanings: list[str]) -> dict[str, object]:
    """"left=LEFT,space=FIRE" or "left=0,right=1" -> {key name: meaning part or action index}."""
    out: dict[str, object] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, sep, target = item.partition("=")
        if not sep:
            raise ValueError(f"--keys: {item!r} is not KEY=ACTION (e.g. left=LEFT or left=0)")
        target = target.strip()
        if target.isdigit():
            if int(target) >= len(meanings):
                raise ValueError(f"--keys: action {target} out of range (the game has {len(meanings)})")
            out[key.strip().lower()] = int(target)
        elif target.upper() in MEANING_PARTS:
            out[key.strip().lower()] = target.upper()
        else:
            raise ValueError(f"--keys: {target!r} is neither an action index nor one of {MEANING_PARTS}")
    return out


class KeyboardPolicy:
    """A person plays in a pygame-ce window; held keys pick the discrete action.

    Key state is kept from KEYDOWN/KEYUP events (not pygame.key.get_pressed, which stays empty
    under SDL's dummy driver), and a key tapped and released between two frames still counts as
    held for that frame. The held parts (UP, LEFT, FIRE, ...) choose the action whose meaning has
    exactly those parts, else the one sharing the most of them without any extra, else action 0.
    Escape or closing the window stops the recording. The loop is paced to `fps`.
    """

    def __init__(self, meanings: list[str], fps: float, keymap: dict[str, object] | None = None,
                 scale: int = 3, title: str = "dreamcade record") -> None:
        os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
        import pygame

        self.pg = pygame
        self.meanings, self.fps, self.scale, self.title = meanings, fps, scale, title
        self.parts = [meaning_parts(m) for m in meanings]
        keymap = keymap if keymap is not None else DEFAULT_KEYS
        if not any(self.parts) and not any(isinstance(v, int) for v in keymap.values()):
            raise ValueError("this game's actions have no UP/DOWN/LEFT/RIGHT/FIRE meanings; "
                             "pass --keys KEY=INDEX,... (e.g. --keys left=0,right=1)")
        self.keymap = {key_code(name): target for name, target in keymap.items()}
        self.held: set[int] = set()
        self.tapped: set[int] = set()
        self.screen = None
        self.clock = pygame.time.Clock()

    def _open(self, frame: np.ndarray) -> None:
        self.pg.display.init()
        h, w = frame.shape[:2]
        self.screen = self.pg.display.set_mode((w * self.scale, h * self.scale))
        self.pg.display.set_caption(self.title)

    def poll(self) -> None:
        """Read pending events into the held and tapped key sets."""
        pg = self.pg
        for ev in pg.event.get():
            if ev.type == pg.QUIT or (ev.type == pg.KEYDOWN and ev.key == pg.K_ESCAPE):
                raise StopRecording
            if ev.type == pg.KEYDOWN and ev.key in self.keymap:
                self.held.add(ev.key)
                self.tapped.add(ev.key)
            elif ev.type == pg.KEYUP:
                self.held.discard(ev.key)

    def action(self) -> int:
        """The action for the frame that just ended; clears the taps."""
        active = self.held | self.tapped
        self.tapped = set()
        return pick_action(self.parts, [self.keymap[k] for k in active])

    def act(self, frame: np.ndarray) -> int:
        if self.screen is None:
            self._open(frame)
        surf = self.pg.surfarray.make_surface(np.ascontiguousarray(frame.transpose(1, 0, 2)))
        self.screen.blit(self.pg.transform.scale(surf, self.screen.get_size()), (0, 0))
        self.pg.display.flip()
        self.clock.tick(self.fps)
        self.poll()
        return self.action()

    def close(self) -> None:
        if self.screen is not None:
            self.pg.display.quit()
            self.screen = None
