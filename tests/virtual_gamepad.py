"""A virtual game controller for tests: SDL_JoystickAttachVirtual through ctypes on the SDL
library inside the pygame-ce wheel (the one pygame itself runs on, so pygame sees the pad).

It has SDL's standard controller layout (15 buttons, 6 axes, 1 hat), so SDL maps it as a game
controller and record.gamepad reads it like a real one. It lives in this process only.
"""

from __future__ import annotations

import ctypes
import glob
import os

from dreamcade.record.gamepad import AXIS_NAMES
from dreamcade.record.inputs import PAD_BUTTONS

SDL_JOYSTICK_TYPE_GAMECONTROLLER = 1
HAT = {(0, 0): 0, (0, 1): 1, (1, 0): 2, (0, -1): 4, (-1, 0): 8,
       (1, 1): 3, (1, -1): 6, (-1, -1): 12, (-1, 1): 9}  # SDL_HAT_* bits (up 1, right 2, down 4, left 8)


def sdl_library() -> ctypes.CDLL:
    import pygame

    here = os.path.dirname(pygame.__file__)
    patterns = (os.path.join(here, os.pardir, "pygame_ce.libs", "libSDL2-2*"),  # Linux wheels
                os.path.join(here, ".dylibs", "libSDL2*"), os.path.join(here, "SDL2.dll"))
    found = sorted(f for pattern in patterns for f in glob.glob(pattern))
    if not found:
        raise RuntimeError(f"no SDL library inside pygame-ce at {here} (did the wheel layout change?)")
    sdl = ctypes.CDLL(found[0])
    sdl.SDL_JoystickAttachVirtual.restype = ctypes.c_int
    sdl.SDL_JoystickAttachVirtual.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    sdl.SDL_JoystickDetachVirtual.argtypes = [ctypes.c_int]
    sdl.SDL_JoystickOpen.restype = ctypes.c_void_p
    sdl.SDL_JoystickOpen.argtypes = [ctypes.c_int]
    sdl.SDL_JoystickClose.argtypes = [ctypes.c_void_p]
    sdl.SDL_JoystickSetVirtualButton.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint8]
    sdl.SDL_JoystickSetVirtualAxis.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int16]
    sdl.SDL_JoystickSetVirtualHat.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint8]
    return sdl


class VirtualGamepad:
    """Attach on creation; set buttons (by SDL name), axes (sticks -1..1, triggers 0..1), the hat."""

    def __init__(self) -> None:
        import pygame

        pygame.joystick.init()
        self.sdl = sdl_library()
        self.index = self.sdl.SDL_JoystickAttachVirtual(SDL_JOYSTICK_TYPE_GAMECONTROLLER,
                                                        len(AXIS_NAMES), len(PAD_BUTTONS), 1)
        if self.index < 0:
            raise RuntimeError("SDL_JoystickAttachVirtual failed")
        self.handle = self.sdl.SDL_JoystickOpen(self.index)  # values apply only while it is open
        for name in ("lefttrigger", "righttrigger"):
            self.axis(name, 0.0)

    def button(self, name: str, down: bool) -> None:
        self.sdl.SDL_JoystickSetVirtualButton(self.handle, PAD_BUTTONS.index(name), int(down))

    def axis(self, name: str, value: float) -> None:
        """Sticks in [-1, 1]; triggers in [0, 1] (SDL maps a trigger's full joystick range to it)."""
        a = AXIS_NAMES.index(name)
        if name.endswith("trigger"):
            value = 2 * value - 1
        self.sdl.SDL_JoystickSetVirtualAxis(self.handle, a, int(round(max(-1.0, min(1.0, value)) * 32767)))

    def hat(self, x: int, y: int) -> None:
        self.sdl.SDL_JoystickSetVirtualHat(self.handle, 0, HAT[(x, y)])

    def detach(self) -> None:
        if self.handle:
            self.sdl.SDL_JoystickClose(self.handle)
            self.handle = None
            self.sdl.SDL_JoystickDetachVirtual(self.index)
