"""The control spec: what each action dimension of a store means.

A spec is an ordered list of controls. A binary control is a key, a mouse button or a gamepad
button (1 when held at any moment of a frame interval, else 0). A continuous control is a mouse
delta (pixels per frame), a stick axis in [-1, 1] or a trigger in [0, 1]; `low` and `high` give
its nominal range, which the model uses to scale it. An `exclusive` spec is a discrete game
action space: exactly one binary control is on in every frame (a one-hot row).

The spec is stored in a store's attributes, in a checkpoint's metadata, and read from the TOML
control profiles in configs/controls/. Two specs are the same when their dicts are equal.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from dreamcade.dataset.errors import UserError

BINARY = "binary"
CONTINUOUS = "continuous"
KINDS = (BINARY, CONTINUOUS)


class SpecError(UserError, ValueError):
    """A control spec that cannot be used, or one that differs from the expected one."""


@dataclass(frozen=True)
class Control:
    """One action dimension."""

    name: str
    """Unique name, e.g. "left", "mouse_dx", "FIRE"."""
    kind: str = BINARY
    """"binary" (0 or 1) or "continuous"."""
    source: str = ""
    """The physical input it is read from, e.g. "key:left", "mouse:dx", "pad:axis:leftx";
    empty for game actions that no device produces directly."""
    low: float = 0.0
    """Nominal lower bound (binary: 0)."""
    high: float = 1.0
    """Nominal upper bound (binary: 1)."""


@dataclass(frozen=True)
class ControlSpec:
    """The ordered controls of a store; `len(spec)` is the action dimension A."""

    controls: tuple[Control, ...]
    exclusive: bool = False
    """True for a discrete action space: every action row is one-hot over the controls."""
    name: str = ""
    """The profile or game it came from (informational; not compared)."""
    _index: dict = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_controls(self.controls, self.exclusive, where="control spec")
        object.__setattr__(self, "_index", {c.name: i for i, c in enumerate(self.controls)})

    def __len__(self) -> int:
        return len(self.controls)

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.controls]

    def index(self, name: str) -> int:
        if name not in self._index:
            raise SpecError(f"no control named {name!r} in the spec (controls: {self.names})")
        return self._index[name]

    def to_dict(self) -> dict:
        return {"name": self.name, "exclusive": self.exclusive,
                "controls": [asdict(c) for c in self.controls]}

    @classmethod
    def from_dict(cls, d: dict, where: str = "control spec") -> ControlSpec:
        if not isinstance(d, dict) or not isinstance(d.get("controls"), list):
            raise SpecError(f"{where}: expected a table with a 'controls' list, got {d!r:.200}")
        unknown = set(d) - {"name", "exclusive", "controls"}
        if unknown:
            raise SpecError(f"{where}: unknown keys {sorted(unknown)}; allowed: name, exclusive, controls")
        controls = []
        for i, c in enumerate(d["controls"]):
            if not isinstance(c, dict):
                raise SpecError(f"{where}: controls[{i}] must be a table, got {c!r}")
            bad = set(c) - {"name", "kind", "source", "low", "high"}
            if bad:
                raise SpecError(f"{where}: controls[{i}] has unknown keys {sorted(bad)}; "
                                "allowed: name, kind, source, low, high")
            if "name" not in c:
                raise SpecError(f"{where}: controls[{i}] has no 'name'")
            kind = c.get("kind", BINARY)
            low, high = (0.0, 1.0) if kind == BINARY else (-1.0, 1.0)
            controls.append(Control(name=str(c["name"]), kind=kind, source=str(c.get("source", "")),
                                    low=float(c.get("low", low)), high=float(c.get("high", high))))
        try:
            return cls(tuple(controls), exclusive=bool(d.get("exclusive", False)),
                       name=str(d.get("name", "")))
        except SpecError as e:
            raise SpecError(f"{where}: {e}") from None

    @classmethod
    def from_toml(cls, path: str | Path) -> ControlSpec:
        """Read a control profile (see configs/controls/)."""
        path = Path(path)
        if not path.is_file():
            raise SpecError(f"{path}: no such control profile (see configs/controls/ for examples)")
        try:
            d = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise SpecError(f"{path}: not valid TOML: {e}") from None
        d.setdefault("name", path.stem)
        return cls.from_dict(d, where=str(path))

    def differences(self, other: ControlSpec) -> list[str]:
        """Human-readable differences; empty when the specs are the same."""
        out = []
        if self.exclusive != other.exclusive:
            out.append(f"exclusive: {self.exclusive} vs {other.exclusive}")
        a, b = self.names, other.names
        if a != b:
            out.append(f"controls: {a} vs {b}")
        else:
            for x, y in zip(self.controls, other.controls):
                if x != y:
                    out.append(f"control {x.name!r}: {asdict(x)} vs {asdict(y)}")
        return out

    def check_same(self, other: ControlSpec, this: str, that: str) -> None:
        """Raise SpecError naming both sides when the specs differ."""
        diff = self.differences(other)
        if diff:
            raise SpecError(f"control spec of {this} differs from that of {that}: " + "; ".join(diff)
                            + ". Record or build with the same control profile, or retrain.")

    def check_actions(self, actions: np.ndarray, where: str = "actions") -> None:
        """Raise SpecError unless `actions` is a valid [T, A] array for this spec."""
        if actions.ndim != 2 or actions.shape[1] != len(self):
            raise SpecError(f"{where}: expected shape [T, {len(self)}], got {list(actions.shape)}")
        if not np.isfinite(actions).all():
            raise SpecError(f"{where}: contains NaN or infinite values")
        binary = [i for i, c in enumerate(self.controls) if c.kind == BINARY]
        if binary and not np.isin(actions[:, binary], (0.0, 1.0)).all():
            raise SpecError(f"{where}: binary controls must be 0 or 1")
        if self.exclusive and len(actions) and not (actions.sum(axis=1) == 1).all():
            raise SpecError(f"{where}: exclusive spec needs exactly one control on per row")

    def one_hot(self, index: int) -> np.ndarray:
        row = np.zeros(len(self), np.float32)
        row[index] = 1.0
        return row


def check_controls(controls: tuple[Control, ...], exclusive: bool, where: str) -> None:
    if not controls:
        raise SpecError(f"{where}: no controls")
    seen = set()
    for c in controls:
        if not c.name or c.name in seen:
            raise SpecError(f"{where}: control names must be unique and non-empty, got {c.name!r} twice")
        seen.add(c.name)
        if c.kind not in KINDS:
            raise SpecError(f"{where}: control {c.name!r} has kind {c.kind!r}; use one of {KINDS}")
        if not (math.isfinite(c.low) and math.isfinite(c.high) and c.low < c.high):
            raise SpecError(f"{where}: control {c.name!r} needs finite low < high, got {c.low}, {c.high}")
        if c.kind == BINARY and (c.low, c.high) != (0.0, 1.0):
            raise SpecError(f"{where}: binary control {c.name!r} must have low 0 and high 1")
    if exclusive and any(c.kind != BINARY for c in controls):
        raise SpecError(f"{where}: an exclusive spec holds binary controls only")
