"""Input state for screen recording: canonical key names, the per-frame action assembly, and the
keyboard and mouse listeners (pynput).

Every physical input has a canonical source string, the `source` of a control in a profile:
"key:<name>" (lower-case pynput-style names: "left", "space", "shift", "f9", "a", "1"),
"mouse:left|right|middle" (buttons), "mouse:dx|dy" (pointer motion in pixels), and the gamepad's
"pad:button:<SDL name>", "pad:axis:<SDL name>", "pad:hat:<n>:x|y" (read in record/gamepad.py).
pynput's keys and pygame's key names both map to the same names, so the play window can drive a
model through the same control spec.

`InputState` turns timestamped input into one action row per frame interval: a binary control
is 1 if it was held at any moment of the interval (a tap shorter than a frame still counts),
mouse motion is summed over the interval, sticks and triggers are sampled at its end. It keeps
only the controls that the spec names, and stores events only while recording is on; of other
keys it counts presses while recording, by key name (what the profile misses), nothing more.
"""

from __future__ import annotations

import string
import threading
import time
from collections.abc import Callable

import numpy as np

from dreamcade.dataset.controls import BINARY, CONTINUOUS, ControlSpec, SpecError
from dreamcade.dataset.errors import UserError

# -- canonical names ---------------------------------------------------------------------------

NAMED_KEYS = (
    "left", "right", "up", "down", "space", "shift", "ctrl", "alt", "alt_gr", "cmd", "enter", "tab",
    "esc", "backspace", "delete", "insert", "home", "end", "page_up", "page_down", "caps_lock",
    "num_lock", "scroll_lock", "print_screen", "pause", "menu",
    *(f"f{i}" for i in range(1, 21)),
)
CHAR_KEYS = tuple(string.ascii_lowercase + string.digits + "`-=[]\\;',./")
KEY_NAMES = frozenset(NAMED_KEYS + CHAR_KEYS)

# What a US layout types with shift held, back to the key itself, so that a key pressed before
# shift and released after it is one key ("1" down, "!" up would leave "1" held forever).
_UNSHIFT = dict(zip('~!@#$%^&*()_+{}|:"<>?', "`1234567890-=[]\\;',./"))
# pynput names that differ from the canonical ones (left/right variants merge into one key)
_PYNPUT_ALIASES = {"shift_l": "shift", "shift_r": "shift", "ctrl_l": "ctrl", "ctrl_r": "ctrl",
                   "alt_l": "alt", "alt_r": "alt", "cmd_l": "cmd", "cmd_r": "cmd"}
# X11 keysym names (lower-cased) that differ from the canonical ones
_X11_ALIASES = {"shift_l": "shift", "shift_r": "shift", "control_l": "ctrl", "control_r": "ctrl",
                "alt_l": "alt", "alt_r": "alt", "super_l": "cmd", "super_r": "cmd",
                "iso_level3_shift": "alt_gr", "return": "enter", "escape": "esc", "prior": "page_up",
                "next": "page_down", "print": "print_screen", "grave": "`", "minus": "-", "equal": "=",
                "bracketleft": "[", "bracketright": "]", "backslash": "\\", "semicolon": ";",
                "apostrophe": "'", "comma": ",", "period": ".", "slash": "/"}
_PYGAME_ALIASES = {
    "left shift": "shift", "right shift": "shift", "left ctrl": "ctrl", "right ctrl": "ctrl",
    "left alt": "alt", "right alt": "alt", "left meta": "cmd", "right meta": "cmd",
    "left gui": "cmd", "right gui": "cmd", "left super": "cmd", "right super": "cmd",
    "return": "enter", "escape": "esc", "page up": "page_up", "page down": "page_down",
    "caps lock": "caps_lock", "numlock": "num_lock", "num lock": "num_lock",
    "scroll lock": "scroll_lock", "print screen": "print_screen", "altgr": "alt_gr",
}

MOUSE_BUTTONS = ("left", "right", "middle")
MOUSE_DELTAS = ("dx", "dy")
PAD_BUTTONS = ("a", "b", "x", "y", "back", "guide", "start", "leftstick", "rightstick",
               "leftshoulder", "rightshoulder", "dpup", "dpdown", "dpleft", "dpright")
PAD_STICKS = ("leftx", "lefty", "rightx", "righty")
PAD_TRIGGERS = ("lefttrigger", "righttrigger")


def char_key_name(char: str) -> str | None:
    """The canonical name of a typed character: "A" -> "a", "!" -> "1", "\\x01" (ctrl-a) -> "a"."""
    if len(char) != 1:
        return None
    if ord(char) < 32 and char not in "\t\r\n":  # what some platforms report with ctrl held
        char = chr(ord(char) + 96)
    if char == " ":
        return "space"
    char = _UNSHIFT.get(char, char).lower()
    return char if char in KEY_NAMES else None


def pynput_key_name(key) -> str | None:
    """The canonical name of a pynput `Key` or `KeyCode`; None for keys without one."""
    name = getattr(key, "name", None)  # Key members (Key.left, Key.shift_r, ...)
    if isinstance(name, str):
        name = _PYNPUT_ALIASES.get(name, name)
        return name if name in KEY_NAMES else None
    char = getattr(key, "char", None)
    return char_key_name(char) if char else None


def x11_key_name(keysym: str) -> str | None:
    """The canonical name of an X11 keysym name: "Control_L" -> "ctrl", "Prior" -> "page_up"."""
    name = keysym.lower()
    name = _X11_ALIASES.get(name, name)
    return name if name in KEY_NAMES else None


def pygame_key_name(key: int | str) -> str | None:
    """The canonical name of a pygame key code or of `pygame.key.name()`'s text."""
    if isinstance(key, int):
        import pygame

        key = pygame.key.name(key)
    name = key.lower()
    name = _PYGAME_ALIASES.get(name, name)
    if name in KEY_NAMES:
        return name
    return char_key_name(name) if len(name) == 1 else None


# -- sources of a profile ----------------------------------------------------------------------

def source_kind(source: str) -> str | None:
    """The kind a source needs (binary or continuous), or None when it is not a known source."""
    parts = source.split(":")
    if parts[0] == "key" and len(parts) == 2 and parts[1] in KEY_NAMES:
        return BINARY
    if parts[0] == "mouse" and len(parts) == 2:
        return BINARY if parts[1] in MOUSE_BUTTONS else CONTINUOUS if parts[1] in MOUSE_DELTAS else None
    if parts[:2] == ["pad", "button"] and len(parts) == 3 and parts[2] in PAD_BUTTONS:
        return BINARY
    if parts[:2] == ["pad", "axis"] and len(parts) == 3 and parts[2] in PAD_STICKS + PAD_TRIGGERS:
        return CONTINUOUS
    if parts[:2] == ["pad", "hat"] and len(parts) == 4 and parts[2].isdigit() and parts[3] in ("x", "y"):
        return CONTINUOUS
    return None


def _source_help(source: str) -> str:
    kind = source.split(":")[0]
    if kind == "key":
        return ("key names are lower-case: left, right, up, down, space, shift, ctrl, alt, enter, "
                "tab, esc, f1..f20, or one character such as a, z, 1")
    if kind == "mouse":
        return "use mouse:left, mouse:right, mouse:middle (buttons) or mouse:dx, mouse:dy (motion)"
    if kind == "pad":
        return (f"use pad:button:<{'|'.join(PAD_BUTTONS)}>, pad:axis:<{'|'.join(PAD_STICKS + PAD_TRIGGERS)}> "
                "or pad:hat:0:x, pad:hat:0:y")
    return "a source starts with key:, mouse: or pad: (e.g. key:left, mouse:dx, pad:button:a)"


def check_sources(spec: ControlSpec, where: str) -> None:
    """Raise SpecError, naming `where` (the profile file) and the control, unless every control
    has a source the screen recorder can read, of the kind it needs."""
    for i, c in enumerate(spec.controls):
        field = f"{where}: controls[{i}] ({c.name!r}) source"
        if not c.source:
            raise SpecError(f"{field} is empty; a screen recording reads each control from a device, "
                            "e.g. source = \"key:left\"")
        kind = source_kind(c.source)
        if kind is None:
            raise SpecError(f"{field} {c.source!r} is not an input the recorder knows; {_source_help(c.source)}")
        if kind != c.kind:
            raise SpecError(f"{field} {c.source!r} is {kind}; set kind = \"{kind}\" for it")
    if spec.exclusive:
        raise SpecError(f"{where}: exclusive = true is for game action spaces; a screen recording "
                        "stores every input on its own (remove exclusive)")


# -- per-frame assembly ------------------------------------------------------------------------

Event = tuple[float, int, float]  # (time in s, control index, value)


class InputState:
    """Thread-safe input state of the controls of one spec, cut into frame intervals.

    Devices call `set` (a button's state, 1 or 0, or an axis level) and `add` (a mouse delta)
    from their own threads; the capture loop calls `open` when recording starts, `cut` at every
    frame and `close` when recording stops. Event times are taken from `clock` (seconds, by
    default time.monotonic) under the same lock as the cuts, so an event stored with time e
    belongs to the frame interval [t_k, t_k+1) that contains e.

    Inputs that the spec does not name are dropped on arrival; while recording, a press of a key
    the spec does not name adds one to `unrecorded[key name]` (auto-repeat not counted). While
    recording is off, the held state of named buttons and axes is kept in memory but nothing is
    queued for the store; `open` stores what is held then (a key held before the start or across
    a pause) as events at its time, so the events say what the actions say.
    """

    def __init__(self, spec: ControlSpec, clock: Callable[[], float] = time.monotonic) -> None:
        self.spec, self.clock = spec, clock
        self.routes: dict[str, tuple[int, ...]] = {}
        for i, c in enumerate(spec.controls):
            self.routes[c.source] = self.routes.get(c.source, ()) + (i,)
        n = len(spec)
        self._binary = np.array([c.kind == BINARY for c in spec.controls])
        self._delta = np.array([c.source in ("mouse:dx", "mouse:dy") for c in spec.controls])
        self._held = np.zeros(n, bool)
        self._hit = np.zeros(n, bool)
        self._level = np.zeros(n, np.float32)
        self._sum = np.zeros(n, np.float64)
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self.recording = False
        self.unrecorded: dict[str, int] = {}  # key name -> presses while recording
        self._unrecorded_down: set[str] = set()

    def wants(self, source: str) -> bool:
        """Whether any control reads `source`."""
        return source in self.routes

    def wants_prefix(self, prefix: str) -> bool:
        return any(s.startswith(prefix) for s in self.routes)

    def set(self, source: str, value: float) -> None:
        """A button went down (1) or up (0), or an axis moved to `value`."""
        idx = self.routes.get(source)
        if not idx:
            if source.startswith("key:"):
                self._count_unrecorded(source[4:], value >= 0.5)
            return
        with self._lock:
            t = self.clock()
            for i in idx:
                if self._binary[i]:
                    value = 1.0 if value >= 0.5 else 0.0
                    if bool(value) == self._held[i]:
                        continue  # auto-repeat, or a release never pressed while we listened
                    self._held[i] = bool(value)
                    self._hit[i] |= bool(value) and self.recording
                elif self._level[i] == value:
                    continue
                else:
                    self._level[i] = value
                if self.recording:
                    self._events.append((t, i, float(value)))

    def _count_unrecorded(self, key: str, down: bool) -> None:
        """A press counts while recording, once until its release (a key held since before the
        start or a pause, auto-repeating, is not a press)."""
        with self._lock:
            if not down:
                self._unrecorded_down.discard(key)
            elif key not in self._unrecorded_down:
                self._unrecorded_down.add(key)
                if self.recording:
                    self.unrecorded[key] = self.unrecorded.get(key, 0) + 1

    def add(self, source: str, delta: float) -> None:
        """Relative motion (mouse dx or dy, pixels) to sum over the frame interval."""
        idx = self.routes.get(source)
        if not idx or delta == 0:
            return
        with self._lock:
            if not self.recording:
                return
            t = self.clock()
            for i in idx:
                self._sum[i] += delta
                self._events.append((t, i, float(delta)))

    def release_all(self, prefix: str) -> None:
        """Let go of every control whose source starts with `prefix` (a device went away)."""
        for source in self.routes:
            if source.startswith(prefix):
                self.set(source, 0.0)

    def open(self) -> float:
        """Recording starts now (the time of the first frame); returns that time. Buttons held
        and axes off rest now are stored as events at this time."""
        with self._lock:
            t = self.clock()
            self.recording = True
            self._hit[:] = self._held
            self._sum[:] = 0
            level = ~self._binary & ~self._delta & (self._level != 0)
            self._events = [(t, int(i), 1.0) for i in np.flatnonzero(self._held)]
            self._events += [(t, int(i), float(self._level[i])) for i in np.flatnonzero(level)]
            self._events.sort(key=lambda e: e[1])
            return t

    def cut(self) -> tuple[float, np.ndarray, list[Event]]:
        """End the current frame interval now: returns its end time (the next frame's time), the
        action row of the interval (float32 [A]) and its events."""
        with self._lock:
            return self._cut()

    def close(self) -> tuple[float, np.ndarray, list[Event]]:
        """Recording stops now: the last interval's end time, action row and events, as `cut`;
        afterwards nothing is queued until the next `open`."""
        with self._lock:
            self.recording = False
            return self._cut()

    def _cut(self) -> tuple[float, np.ndarray, list[Event]]:
        t = self.clock()
        action = np.where(self._binary, self._hit, np.where(self._delta, self._sum, self._level))
        self._hit[:] = self._held
        self._sum[:] = 0
        events, self._events = self._events, []
        return t, action.astype(np.float32), events


# -- keyboard and mouse --------------------------------------------------------------------------

class DisplayError(UserError, RuntimeError):
    """The keyboard and mouse cannot be read (no display, or no pynput backend)."""


class KeyboardMouse:
    """pynput listeners feeding an InputState, and the recorder's hotkeys.

    Only keys and buttons that the profile names reach the state; hotkeys (on press, never
    stored) call their callback. The mouse listener runs only when the profile names a mouse
    input. Keys already held when listening starts are read from the X server (pynput's xorg
    backend only; elsewhere they read held from their next press or auto-repeat). pynput is
    imported here, lazily: on Linux it needs an X display.
    """

    def __init__(self, state: InputState, hotkeys: dict[str, Callable[[], None]] | None = None) -> None:
        self.state = state
        self.hotkeys = dict(hotkeys or {})
        self._hotkeys_down: set[str] = set()
        self._pointer: tuple[int, int] | None = None
        self._listeners: list = []

    def start(self) -> None:
        """Start listening; raises DisplayError when there is nothing to listen to."""
        try:
            from pynput import keyboard, mouse
        except ImportError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DisplayError(f"cannot read the keyboard and mouse ({first}). On Linux run inside "
                               "an X session (DISPLAY set; under Wayland, an XWayland app)") from None
        self._listeners.append(keyboard.Listener(on_press=self._press, on_release=self._release))
        if self.state.wants_prefix("mouse:"):
            self._pointer = mouse.Controller().position  # so that the first motion counts too
            self._listeners.append(mouse.Listener(on_move=self._move, on_click=self._click))
        for listener in self._listeners:
            listener.daemon = True
            listener.start()
        for listener in self._listeners:
            listener.wait()
        if keyboard.Listener.__module__.endswith("._xorg"):
            self._press_held_keys()

    def _press_held_keys(self) -> None:
        from dreamcade.record.x11 import WindowError, held_keysyms

        try:
            names = {x11_key_name(k) for k in held_keysyms()} - {None}
        except WindowError:
            return
        for name in names - set(self.hotkeys):
            self.state.set(f"key:{name}", 1.0)

    def stop(self) -> None:
        for listener in self._listeners:
            listener.stop()
        self._listeners = []

    def _press(self, key) -> None:
        name = pynput_key_name(key)
        if name in self.hotkeys:
            if name not in self._hotkeys_down:  # not on auto-repeat
                self._hotkeys_down.add(name)
                self.hotkeys[name]()
        elif name is not None:
            self.state.set(f"key:{name}", 1.0)

    def _release(self, key) -> None:
        name = pynput_key_name(key)
        if name in self.hotkeys:
            self._hotkeys_down.discard(name)
        elif name is not None:
            self.state.set(f"key:{name}", 0.0)

    def _move(self, x: int, y: int) -> None:
        if self._pointer is not None:
            self.state.add("mouse:dx", x - self._pointer[0])
            self.state.add("mouse:dy", y - self._pointer[1])
        self._pointer = (x, y)

    def _click(self, x: int, y: int, button, pressed: bool) -> None:
        name = getattr(button, "name", None)
        if name in MOUSE_BUTTONS:
            self.state.set(f"mouse:{name}", 1.0 if pressed else 0.0)
