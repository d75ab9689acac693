"""Live input for the play window: pygame-ce events (keyboard, mouse, gamepad) -> one action row
per generated frame, through a checkpoint's control spec, with the recorder's rules: a binary
input held at any moment of the frame interval counts (a tap shorter than a frame included),
mouse motion is summed over the interval, sticks and triggers are sampled at its end.

Two kinds of spec:
- a device spec (screen recordings): every control names its source ("key:left", "mouse:dx",
  "pad:axis:leftx", ...), read into record.inputs.InputState exactly as the recorder does;
- an exclusive spec (a discrete game: one-hot over actions named by Atari meanings): the keys of
  record.policies.DEFAULT_KEYS (or --keys) and the pad's d-pad, left stick, hat and A/B buttons
  hold meaning parts (UP, LEFT, FIRE, ...), and record.policies.pick_action picks the action, as
  `record env --policy keyboard` does.

Key state is kept from KEYDOWN/KEYUP events (pygame.key.get_pressed stays empty under SDL's dummy
driver). Inputs the spec does not read do nothing to the model; the keys among them that are the
window's own (HOTKEYS) are handed back to the window.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from dreamcade.dataset.controls import BINARY, CONTINUOUS, Control, ControlSpec
from dreamcade.record.inputs import KEY_NAMES, InputState, pygame_key_name, source_kind
from dreamcade.record.policies import DEFAULT_KEYS, meaning_parts, pick_action

# an exclusive game's gamepad: buttons holding a meaning part, and axes (source, part below
# -STICK_THRESHOLD, part above +STICK_THRESHOLD); stick y is positive down, hat y is 1 for up
PAD_PARTS = {"pad:button:dpup": "UP", "pad:button:dpdown": "DOWN", "pad:button:dpleft": "LEFT",
             "pad:button:dpright": "RIGHT", "pad:button:a": "FIRE", "pad:button:b": "FIRE"}
PAD_AXIS_PARTS = (("pad:axis:leftx", "LEFT", "RIGHT"), ("pad:axis:lefty", "UP", "DOWN"),
                  ("pad:hat:0:x", "LEFT", "RIGHT"), ("pad:hat:0:y", "DOWN", "UP"))
STICK_THRESHOLD = 0.5
MOUSE_BUTTONS = {1: "left", 2: "middle", 3: "right"}  # pygame's button numbers

# the play window's own keys: name, keys, what it does. A key the control spec reads goes to the
# model instead, so every hotkey has a second key where it can
HOTKEYS = (
    ("help", ("h", "f1"), "show / hide this help"),
    ("reset", ("r", "f2"), "reset to a new real context"),
    ("pause", ("p", "f3"), "pause / resume (releases a grabbed mouse)"),
    ("step", ("n", "f4"), "one frame while paused"),
    ("steps_down", ("[", "f5"), "sampler steps - 1"),
    ("steps_up", ("]", "f6"), "sampler steps + 1"),
    ("noise_down", ("-", "f7"), "context noise - 0.05"),
    ("noise_up", ("=", "f8"), "context noise + 0.05"),
    ("save", ("f9",), "start / stop saving the session"),
    ("hud", ("tab", "f10"), "show / hide the HUD"),
    ("view", ("v", "f11"), "model / real game / side by side"),
    ("screenshot", ("f12",), "screenshot of the window (PNG)"),
    ("quit", ("esc",), "quit (also: close the window, Ctrl-C)"),
)


def unplayable_controls(spec: ControlSpec) -> list[str]:
    """Controls of a device spec that no keyboard, mouse or gamepad input can produce (empty or
    unknown source, or a source of the other kind), as "name (source 'x')"."""
    if spec.exclusive:
        return []
    return [f"{c.name} (source {c.source!r})" for c in spec.controls if source_kind(c.source) != c.kind]


def input_messages(spec: ControlSpec, live: LiveInput, keys: str) -> list[str]:
    """What the player should know about the controls: --keys it ignores, controls nothing drives."""
    messages = [] if spec.exclusive or not keys else [
        "--keys is for discrete games; this model reads the keys its control spec names"]
    bad = unplayable_controls(spec)
    if bad:
        messages.append(f"no keyboard, mouse or gamepad input drives {', '.join(bad)}; they stay at 0 "
                        "(play reads key:, mouse: and pad: sources; retrain with a control profile naming them)")
    if not live.playable:
        messages.append("nothing you press reaches this model: " + ("its actions have no UP/DOWN/LEFT/RIGHT/FIRE "
                        "meanings; pass --keys KEY=INDEX,... (e.g. --keys left=0,right=1)" if spec.exclusive
                        else "none of its controls has an input source play can read"))
    return messages


def hotkey_map(claimed: frozenset[str]) -> tuple[dict[str, str], list[str]]:
    """key name -> hotkey, without the keys the model reads; and a warning per shadowed hotkey."""
    keys, warnings = {}, []
    for name, options, _ in HOTKEYS:
        free = [k for k in options if k not in claimed]
        keys.update({k: name for k in free})
        taken = [k for k in options if k in claimed]
        if taken:
            rest = f"use {free[0]}" if free else "it has no key in this game"
            warnings.append(f"the model reads key {taken[0]!r}, so it is not the {name} hotkey here; {rest}")
    return keys, warnings


def check_keymap(keymap: dict[str, object]) -> None:
    """Raise ValueError unless every key of a --keys map is a canonical key name."""
    for key in keymap:
        if key not in KEY_NAMES:
            raise ValueError(f"--keys: {key!r} is not a key name; use lower-case names such as "
                             "left, right, up, down, space, shift, ctrl, enter, or one character (a, z, 1)")


class LiveInput:
    """pygame events -> action rows for `spec`. Call feed(events) with every batch of events the
    window reads, and action() once per generated frame (it ends the frame interval)."""

    def __init__(self, spec: ControlSpec, keymap: dict[str, object] | None = None,
                 clock: Callable[[], float] = time.monotonic, on_change: Callable[[str], None] | None = None) -> None:
        """keymap (exclusive specs): key name -> meaning part ("LEFT") or action index; default
        arrows/WASD move, space/Z fire. on_change(text): told when a gamepad comes or goes."""
        self.spec = spec
        self.targets: list = []  # exclusive: what each control of the input spec holds
        if spec.exclusive:
            self.parts = [meaning_parts(n) for n in spec.names]
            self.keymap = dict(DEFAULT_KEYS if keymap is None else keymap)
            check_keymap(self.keymap)
            self.state = InputState(self._input_spec(), clock)
        else:
            self.keymap = {}
            self.state = InputState(spec, clock)
        self.state.open()
        self.keys = frozenset(s[4:] for s in self.state.routes if s.startswith("key:"))
        self.mouse_motion = self.state.wants("mouse:dx") or self.state.wants("mouse:dy")
        self.needs_pad = not spec.exclusive and self.state.wants_prefix("pad:")
        self.pad = None
        if self.state.wants_prefix("pad:"):
            from dreamcade.record.gamepad import GamepadReader

            notes = on_change or (lambda text: None)
            # the window says itself when a pad it needs is missing; plugs and unplugs are told
            self.pad = GamepadReader(self.state, on_change=lambda t: None if t.startswith("no gamepad") else notes(t))
        self.last_events: list = []

    def _input_spec(self) -> ControlSpec:
        """The devices an exclusive game reads: one control per key and pad input, named by source."""
        controls = []
        for key, target in self.keymap.items():
            controls.append(Control(f"key:{key}", BINARY, f"key:{key}"))
            self.targets.append(target)
        for source, part in PAD_PARTS.items():
            controls.append(Control(source, BINARY, source))
            self.targets.append(part)
        for source, low, high in PAD_AXIS_PARTS:
            controls.append(Control(source, CONTINUOUS, source))
            self.targets.append((low, high))
        return ControlSpec(tuple(controls), name="play input")

    @property
    def playable(self) -> bool:
        """Whether any input reaches the model (an exclusive game with meanings or a keymap with
        action indices, or a device spec with at least one readable control)."""
        if self.spec.exclusive:
            return any(self.parts) or any(isinstance(t, int) for t in self.keymap.values())
        return len(unplayable_controls(self.spec)) < len(self.spec)

    def feed(self, events: list) -> list[str]:
        """Read keyboard, mouse and gamepad events into the state; returns the canonical names of
        the keys pressed that the spec does not read (for the window's own hotkeys)."""
        import pygame as pg

        other = []
        for ev in events:
            if ev.type in (pg.KEYDOWN, pg.KEYUP):
                name = pygame_key_name(ev.key)
                if name in self.keys:
                    self.state.set(f"key:{name}", float(ev.type == pg.KEYDOWN))
                elif ev.type == pg.KEYDOWN and name is not None:
                    other.append(name)
            elif ev.type in (pg.MOUSEBUTTONDOWN, pg.MOUSEBUTTONUP) and ev.button in MOUSE_BUTTONS:
                self.state.set(f"mouse:{MOUSE_BUTTONS[ev.button]}", float(ev.type == pg.MOUSEBUTTONDOWN))
            elif ev.type == pg.MOUSEMOTION and self.mouse_motion:
                self.state.add("mouse:dx", float(ev.rel[0]))
                self.state.add("mouse:dy", float(ev.rel[1]))
        if self.pad is not None:
            self.pad.poll(events)
        return other

    def release(self) -> None:
        """Let go of the keys and mouse buttons (the window lost the focus)."""
        self.state.release_all("key:")
        self.state.release_all("mouse:")

    def action(self) -> np.ndarray:
        """End the frame interval now: the action row of the model's spec, float32 [A]. For a
        device spec, the interval's raw events (time, control index, value) go to last_events."""
        _, row, events = self.state.cut()
        if not self.spec.exclusive:
            self.last_events = events
            return row
        held = []
        for value, target in zip(row, self.targets):
            if isinstance(target, tuple):
                if value <= -STICK_THRESHOLD:
                    held.append(target[0])
                elif value >= STICK_THRESHOLD:
                    held.append(target[1])
            elif value >= 0.5:
                held.append(target)
        return self.spec.one_hot(pick_action(self.parts, held))

    def describe(self) -> list[str]:
        """What drives the model, one line each, for the help overlay."""
        if not self.spec.exclusive:
            return [f"{c.name}: {c.source or '(no source)'}" for c in self.spec.controls]
        by_target: dict[object, list[str]] = {}
        for key, target in self.keymap.items():
            by_target.setdefault(target, []).append(key)
        lines = [f"{t if isinstance(t, str) else self.spec.names[t]}: {', '.join(keys)}"
                 for t, keys in by_target.items()]
        return lines + ["gamepad: d-pad, left stick or hat move; A/B fire"]

    def close(self) -> None:
        if self.pad is not None:
            self.pad.close()
