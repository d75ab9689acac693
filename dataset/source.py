"""What a store's `source` attribute says it was recorded from, in words (docs/store-format.md).

A `record env` store keeps `{"kind": "env", "env_id": ...}`; a `record screen` store
`{"kind": "screen", "window": TITLE, "window_class": CLASS, ...}`, or a `region` or `monitor` in
place of the window; a built store (`kind: "build"`) its recordings' sources in
`sources[i].source`. The world card, play and eval name a game with `game_name`.
"""

from __future__ import annotations

SCREEN = "a screen recording"
"""The name of a game recorded from a region or a monitor of the screen (no window to name it by)."""


def recordings(source: dict | None) -> list[dict]:
    """The sources of the recordings behind a store: its own, or, for a built store, each of
    its recordings' (a store built from built stores is followed down)."""
    source = source if isinstance(source, dict) else {}
    if source.get("kind") != "build":
        return [source]
    return [r for s in source.get("sources") or [] for r in recordings((s or {}).get("source"))]


def game_name(source: dict | None) -> str:
    """The game a store holds: its gymnasium id, the title (else the class) of the window it was
    recorded from, "a screen recording" for a region or monitor, or the store's kind; a built
    store names each of its recordings' games once."""
    return ", ".join(sorted({_name(s) for s in recordings(source)})) or "unknown"


def _name(source: dict) -> str:
    if source.get("kind") == "screen":
        return str(source.get("window") or source.get("window_class") or SCREEN)
    return str(source.get("env_id") or source.get("kind") or "unknown")


def is_screen(source: dict | None) -> bool:
    """Whether every recording behind a store was recorded from the screen."""
    found = recordings(source)
    return bool(found) and all(s.get("kind") == "screen" for s in found)
