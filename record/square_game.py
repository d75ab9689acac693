"""A tiny game to try the screen recorder on: a square that the arrow keys (or WASD, or a
gamepad's left stick and d-pad) move around a window; it turns red while Z (or the pad's A) is
held. `python -m dreamcade.record.square_game [--size 320x240] [--auto]`. Esc or closing the window quits.

It prints `window 0x... ready` once its window is on screen (the X11 window id, for scripts and
tests). `--auto` moves the square by itself (for benchmarks: something on screen that moves).
"""

from __future__ import annotations

import argparse
import os
import sys

from dreamcade.record.inputs import pygame_key_name

TITLE = "dreamcade square game"
BACKGROUND = (24, 28, 48)
SQUARE = (250, 250, 250)
HELD = (230, 40, 40)
MOVES = {"left": (-1, 0), "a": (-1, 0), "right": (1, 0), "d": (1, 0),
         "up": (0, -1), "w": (0, -1), "down": (0, 1), "s": (0, 1)}


class SquareGame:
    """The game's state: where the square is and what is held; step(dt) moves it."""

    def __init__(self, width: int, height: int, side: int, speed: float, auto: bool) -> None:
        self.width, self.height, self.side, self.speed, self.auto = width, height, side, speed, auto
        self.x, self.y = (width - side) / 2, (height - side) / 2
        self.keys: set[str] = set()
        self.stick = (0.0, 0.0)
        self.pad_fire = False
        self.pads: list = []  # open controllers (kept referenced so they stay open)
        self.velocity = (speed, speed * 0.6)  # --auto

    def direction(self) -> tuple[float, float]:
        dx = sum(MOVES[k][0] for k in self.keys if k in MOVES) + self.stick[0]
        dy = sum(MOVES[k][1] for k in self.keys if k in MOVES) + self.stick[1]
        return max(-1.0, min(1.0, dx)), max(-1.0, min(1.0, dy))

    def step(self, dt: float) -> None:
        """Advance by dt seconds: speed is in pixels per second."""
        if self.auto:
            vx, vy = self.velocity
            self.x, self.y = self.x + vx * dt, self.y + vy * dt
            if not 0 <= self.x <= self.width - self.side:
                self.velocity = (-vx, vy)
            if not 0 <= self.y <= self.height - self.side:
                self.velocity = (self.velocity[0], -vy)
        else:
            dx, dy = self.direction()
            self.x += dx * self.speed * dt
            self.y += dy * self.speed * dt
        self.x = min(max(self.x, 0.0), self.width - self.side)
        self.y = min(max(self.y, 0.0), self.height - self.side)

    @property
    def colour(self) -> tuple[int, int, int]:
        return HELD if "z" in self.keys or self.pad_fire else SQUARE


def handle(game: SquareGame, ev, pg) -> bool:
    """Apply one pygame event; False when the game should quit."""
    if ev.type == pg.QUIT:
        return False
    if ev.type in (pg.KEYDOWN, pg.KEYUP):
        name = pygame_key_name(ev.key)
        if name == "esc":
            return False
        if name and ev.type == pg.KEYDOWN:
            game.keys.add(name)
        elif name:
            game.keys.discard(name)
    elif ev.type == pg.CONTROLLERDEVICEADDED:
        from pygame._sdl2 import controller

        game.pads.append(controller.Controller(ev.device_index))
    elif ev.type == pg.CONTROLLERAXISMOTION and ev.axis in (0, 1):
        v = ev.value / 32767 if abs(ev.value) > 4000 else 0.0  # a small dead zone
        game.stick = (v, game.stick[1]) if ev.axis == 0 else (game.stick[0], v)
    elif ev.type in (pg.CONTROLLERBUTTONDOWN, pg.CONTROLLERBUTTONUP):
        down = ev.type == pg.CONTROLLERBUTTONDOWN
        pad = {11: "up", 12: "down", 13: "left", 14: "right"}  # SDL's d-pad buttons
        if ev.button == 0:
            game.pad_fire = down
        elif ev.button in pad:
            (game.keys.add if down else game.keys.discard)(pad[ev.button])
    return True


def window_id(pg) -> int | None:
    return pg.display.get_wm_info().get("window")


def run(width: int, height: int, side: int, speed: float, auto: bool, fps: float, title: str,
        seconds: float | None) -> None:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    import pygame as pg
    from pygame._sdl2 import controller

    pg.display.init()
    pg.joystick.init()
    controller.init()
    screen = pg.display.set_mode((width, height))
    pg.display.set_caption(title)
    game = SquareGame(width, height, side, speed, auto)
    clock, elapsed, shown = pg.time.Clock(), 0.0, False
    running = True
    while running and (seconds is None or elapsed < seconds):
        for ev in pg.event.get():
            running = handle(game, ev, pg) and running
        dt = clock.tick(fps) / 1000.0
        elapsed += dt
        game.step(dt)
        screen.fill(BACKGROUND)
        pg.draw.rect(screen, game.colour, (round(game.x), round(game.y), side, side))
        pg.display.flip()
        if not shown:
            wid = window_id(pg)
            print(f"window {hex(wid) if wid else '?'} ready ({width}x{height})", flush=True)
            shown = True
    pg.quit()


def main(argv: list[str] | None = None) -> int:
    from dreamcade.record.__main__ import parse_size

    p = argparse.ArgumentParser(prog="python -m dreamcade.record.square_game", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=parse_size, default=(320, 240), help="window WIDTHxHEIGHT (default 320x240)")
    p.add_argument("--side", type=int, default=0, help="square side in pixels (default: a tenth of the height)")
    p.add_argument("--speed", type=float, default=0.0, help="pixels per second (default: half the width)")
    p.add_argument("--fps", type=float, default=60.0, help="frames drawn per second")
    p.add_argument("--auto", action="store_true", help="the square moves by itself, bouncing")
    p.add_argument("--title", default=TITLE, help="window title")
    p.add_argument("--seconds", type=float, default=None, help="quit after this long")
    args = p.parse_args(argv)
    w, h = args.size
    run(w, h, args.side or max(4, h // 10), args.speed or w / 2, args.auto, args.fps, args.title, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
