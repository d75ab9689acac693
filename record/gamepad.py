"""A gamepad read through pygame-ce's controller API (SDL's game controller mappings), hot-plug
tolerated, feeding an InputState.

Buttons and axes use SDL's controller names ("pad:button:a", "pad:axis:leftx"); the hat of the
underlying joystick is "pad:hat:0:x" / "pad:hat:0:y" (-1, 0, 1; y is 1 for up). Sticks are
scaled to [-1, 1], triggers to [0, 1]. One pad is read at a time: the first one connected; when
it is unplugged its buttons are released, its axes go to 0, and the next pad connected (or
already connected) takes over.

SDL delivers the pad's changes as events, so a press and release between two polls are both
seen; an event's time is the time of the poll that read it (the poll period, 4 ms by default,
is the time resolution). Polling needs SDL's event queue, hence pygame's display module, which
is started with SDL's dummy video driver when nothing else started it: no window opens.
"""

from __future__ import annotations

import os
import threading
import time

from dreamcade.record.inputs import PAD_BUTTONS, PAD_STICKS, PAD_TRIGGERS, InputState

AXIS_NAMES = PAD_STICKS + PAD_TRIGGERS  # in SDL_GameControllerAxis order
AXIS_MAX = 32767.0


def _pygame():
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    # read the pad while another window (the game) has the focus
    os.environ.setdefault("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")
    import pygame

    return pygame


def axis_value(axis: int, raw: int) -> float:
    """SDL's controller axis value -> [-1, 1] for sticks, [0, 1] for triggers."""
    v = raw / AXIS_MAX
    return min(1.0, max(0.0 if AXIS_NAMES[axis] in PAD_TRIGGERS else -1.0, v))


class GamepadReader:
    """Reads one game controller into `state`; call poll() often, or start() a polling thread.

    All pygame calls happen in the thread that polls (SDL wants its events pumped where they
    were set up). close() closes the pad but leaves pygame's modules initialised.
    """

    def __init__(self, state: InputState, poll_hz: float = 250.0, on_change=None) -> None:
        """poll_hz: polls per second of start()'s thread. on_change(text): told of (un)plugs."""
        self.state = state
        self.period = 1.0 / poll_hz
        self.on_change = on_change or (lambda text: None)
        self.pad = None  # the pygame._sdl2.controller.Controller read now
        self.joystick = None  # the same device through pygame's joystick API (for its hat)
        self.pad_id: int | None = None  # its joystick instance id
        self.name = ""
        self._pg = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- set-up --------------------------------------------------------------------------------

    def _init(self) -> None:
        pg = self._pg = _pygame()
        if not pg.display.get_init():
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
            pg.display.init()  # SDL's event queue lives in the video subsystem; no window opens
        pg.joystick.init()
        from pygame._sdl2 import controller

        controller.init()
        self._controller = controller
        self._pad_events = frozenset((pg.CONTROLLERBUTTONDOWN, pg.CONTROLLERBUTTONUP, pg.CONTROLLERAXISMOTION,
                                       pg.JOYHATMOTION, pg.JOYDEVICEREMOVED))
        self._connect_any()
        if self.pad is None:
            self.on_change("no gamepad connected yet; plug one in at any time")

    def _connect_any(self) -> None:
        for i in range(self._pg.joystick.get_count()):
            if self._connect(i):
                return

    def _connect(self, device_index: int) -> bool:
        if self.pad is not None or not self._controller.is_controller(device_index):
            return False
        self.pad = self._controller.Controller(device_index)
        self.joystick = self.pad.as_joystick()
        self.pad_id = self.joystick.get_instance_id()
        self.name = self.pad.name
        self._read_levels()
        self.on_change(f"gamepad connected: {self.name}")
        return True

    def _disconnect(self) -> None:
        name = self.name
        try:
            self.pad.quit()
        except Exception:  # SDL may have closed it already
            pass
        self.pad = self.joystick = self.pad_id = None
        self.state.release_all("pad:")
        self.on_change(f"gamepad disconnected: {name}")
        self._connect_any()

    def _read_levels(self) -> None:
        """Take the axes and hats as they are now (a pad that was plugged in mid-session)."""
        for a, name in enumerate(AXIS_NAMES):
            self.state.set(f"pad:axis:{name}", axis_value(a, self.pad.get_axis(a)))
        for b, name in enumerate(PAD_BUTTONS):
            self.state.set(f"pad:button:{name}", float(self.pad.get_button(b)))
        for h in range(self.joystick.get_numhats()):
            self._hat(h, self.joystick.get_hat(h))

    def _hat(self, hat: int, value: tuple[int, int]) -> None:
        self.state.set(f"pad:hat:{hat}:x", float(value[0]))
        self.state.set(f"pad:hat:{hat}:y", float(value[1]))

    # -- polling -------------------------------------------------------------------------------

    def poll(self, events: list | None = None) -> None:
        """Read pad events into the state: `events` from a caller that owns pygame's event loop
        (a window), else every pending event (the queue is drained, so it never fills)."""
        if self._pg is None:
            self._init()
        pg = self._pg
        for ev in pg.event.get() if events is None else events:
            if ev.type == pg.CONTROLLERDEVICEADDED:
                self._connect(ev.device_index)
            elif ev.type not in self._pad_events or self.pad is None or ev.instance_id != self.pad_id:
                continue  # not a pad event, or another pad's
            elif ev.type == pg.JOYDEVICEREMOVED:
                self._disconnect()
            elif ev.type in (pg.CONTROLLERBUTTONDOWN, pg.CONTROLLERBUTTONUP) and ev.button < len(PAD_BUTTONS):
                self.state.set(f"pad:button:{PAD_BUTTONS[ev.button]}", float(ev.type == pg.CONTROLLERBUTTONDOWN))
            elif ev.type == pg.CONTROLLERAXISMOTION and ev.axis < len(AXIS_NAMES):
                self.state.set(f"pad:axis:{AXIS_NAMES[ev.axis]}", axis_value(ev.axis, ev.value))
            elif ev.type == pg.JOYHATMOTION:
                self._hat(ev.hat, ev.value)

    def start(self) -> None:
        """Poll in a daemon thread until stop()."""
        self._thread = threading.Thread(target=self._run, name="gamepad", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_t = time.monotonic()
        try:
            while not self._stop.is_set():
                self.poll()
                next_t = max(next_t + self.period, time.monotonic())
                self._stop.wait(max(0.0, next_t - time.monotonic()))
        except Exception as e:  # SDL could not start: record the rest without the pad
            self.on_change(f"gamepad reading stopped ({type(e).__name__}: {e}); recording goes on without it")
        finally:
            self.close()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None

    def close(self) -> None:
        if self.pad is not None:
            self.pad.quit()
        self.pad = self.joystick = self.pad_id = None
