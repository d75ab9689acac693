"""A window to record, found by name on X11 (python-xlib): where it is on screen and whether it
has the keyboard focus; and the keys held down when the recorder starts listening.

Focus: with a window manager that publishes `_NET_ACTIVE_WINDOW` (EWMH; nearly all do), the
active window is the focused one. Without a window manager (a bare Xvfb, a kiosk X server) the X
server's own input focus is asked (XGetInputFocus): a window that took the focus, or, when the
focus is "PointerRoot", the top-level window under the pointer, which is where X sends the keys
then. A window counts as focused when it, a window inside it, or the window manager's frame
around it has the focus. Other platforms: no window lookup here; use --region or --monitor.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from dreamcade.dataset.errors import UserError


class WindowError(UserError, RuntimeError):
    """The window cannot be found or read; the message says what to do."""


@dataclass(frozen=True)
class WindowMatch:
    id: int
    title: str
    wm_class: str


def _connect():
    if not sys.platform.startswith("linux") and not sys.platform.startswith("freebsd"):
        raise WindowError("--window needs X11 (Linux); on this platform record a --region or a --monitor")
    try:
        from Xlib import X, display, error
    except ImportError:
        raise WindowError("--window needs python-xlib (pip install python-xlib)") from None
    try:
        return display.Display(), X, error
    except Exception as e:  # Xlib raises DisplayNameError, DisplayConnectionError, ...
        raise WindowError(f"cannot open the X display ({e}); run inside an X session (DISPLAY set)") from None


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def held_keysyms() -> set[str]:
    """X11 keysym names of the keys held down now (the X server's keymap, each key read without
    modifiers: "Control_L", "Shift_L", "a"); record.inputs.x11_key_name makes them canonical."""
    d, _, _ = _connect()
    try:
        from Xlib import XK

        XK.load_keysym_group("xkb")  # ISO_Level3_Shift (AltGr) and the like
        names = {}  # keysym -> its name
        for attr, keysym in vars(XK).items():
            if attr.startswith("XK_"):
                names.setdefault(keysym, attr[3:])
        keymap = d.query_keymap()  # 32 bytes: bit b of byte i is keycode 8 * i + b
        codes = [8 * i + b for i, byte in enumerate(keymap) for b in range(8) if byte >> b & 1]
        return {names[k] for k in (d.keycode_to_keysym(code, 0) for code in codes) if k in names}
    finally:
        d.close()


class X11Window:
    """One top-level window, picked by `name`: its X11 id ("0x1e00007"), or a case-insensitive
    part of its title or of its WM_CLASS. A name that several viewable windows contain must be
    one window's whole title; otherwise WindowError lists the windows (id, title, class)."""

    def __init__(self, name: str) -> None:
        self.d, self.X, self._error = _connect()
        self.root = self.d.screen().root
        self._atoms = {n: self.d.intern_atom(n) for n in
                       ("_NET_WM_NAME", "_NET_ACTIVE_WINDOW", "_NET_SUPPORTING_WM_CHECK")}
        matches = self._find(name)
        if not matches:
            titles = sorted({m.title or m.wm_class for m in self._find("")} - {""})
            shown = ", ".join(repr(t) for t in titles[:12]) or "none"
            raise WindowError(f"--window {name!r}: no window's title or class contains it "
                              f"(windows on screen: {shown})")
        self.match = _pick(name, matches)
        self.window = self.d.create_resource_object("window", self.match.id)

    @property
    def id(self) -> int:
        return self.match.id

    @property
    def title(self) -> str:
        return self.match.title

    # -- finding -------------------------------------------------------------------------------

    def _find(self, name: str) -> list[WindowMatch]:
        """Matching windows, topmost first, one per top-level window (a frame and the client
        inside it are one window)."""
        want = name.lower()
        wid = int(want, 16) if want.startswith("0x") and _is_hex(want[2:]) else None
        found, tops = [], set()
        for w, top in self._walk(self.root):
            m = self._describe(w)
            if m is None or top in tops:
                continue
            if wid is not None and m.id == wid or (wid is None and (want in m.title.lower()
                                                                   or want in m.wm_class.lower())):
                found.append(m)
                tops.add(top)
        return found

    def _walk(self, window, depth: int = 0, top: int | None = None):
        """(viewable window, id of the top-level window it is in), topmost first (a window
        manager nests clients inside frames)."""
        try:
            children = window.query_tree().children
        except self._error.XError:
            return
        for child in reversed(children):
            try:
                viewable = child.get_attributes().map_state == self.X.IsViewable
            except self._error.XError:
                continue
            if viewable:
                yield child, top or child.id
                if depth < 3:
                    yield from self._walk(child, depth + 1, top or child.id)

    def _describe(self, w) -> WindowMatch | None:
        try:
            prop = w.get_full_property(self._atoms["_NET_WM_NAME"], 0)
            title = _text(prop.value) if prop else _text(w.get_wm_name())
            cls = w.get_wm_class() or ()
        except self._error.XError:
            return None
        if not title and not cls:
            return None
        return WindowMatch(w.id, title, " ".join(_text(c) for c in cls))

    # -- geometry and focus --------------------------------------------------------------------

    def geometry(self) -> tuple[int, int, int, int] | None:
        """(x, y, width, height) of the window's inside on the screen, in pixels; None once the
        window is gone or unmapped."""
        try:
            g = self.window.get_geometry()
            pos = self.root.translate_coords(self.window, 0, 0)
            if self.window.get_attributes().map_state != self.X.IsViewable:
                return None
        except self._error.XError:
            return None
        return pos.x, pos.y, g.width, g.height

    def focused(self) -> bool | None:
        """Whether this window has the keyboard focus; None when X cannot tell."""
        try:
            f = self._focus_window()
            if not f:
                return False  # no window has the focus: X drops the keys
            return f == self.id or f in self._ancestors(self.id) or self.id in self._ancestors(f)
        except self._error.XError:  # a window went away while we asked: ask again next time
            return None

    def _focus_window(self) -> int:
        """The id of the window that has the focus (0: none)."""
        if self.root.get_full_property(self._atoms["_NET_SUPPORTING_WM_CHECK"], 0):
            prop = self.root.get_full_property(self._atoms["_NET_ACTIVE_WINDOW"], 0)
            if prop is not None:  # 0 when the window manager says no window is active
                return int(prop.value[0]) if len(prop.value) else 0
        focus = self.d.get_input_focus().focus
        if isinstance(focus, int) or focus.id == self.root.id:  # PointerRoot or None
            if focus == self.X.NONE:
                return 0
            child = self.root.query_pointer().child  # the top-level window under the pointer
            return child.id if child else 0
        return focus.id

    def _ancestors(self, wid: int) -> list[int]:
        out, w = [], self.d.create_resource_object("window", wid)
        while True:
            parent = w.query_tree().parent
            if not parent or parent.id == self.root.id:
                return out
            out.append(parent.id)
            w = parent

    def close(self) -> None:
        self.d.close()


def _pick(name: str, matches: list[WindowMatch]) -> WindowMatch:
    """The one window `name` means: the only match, or the only one titled `name` exactly."""
    exact = [m for m in matches if m.title.lower() == name.lower()]
    candidates = exact or matches
    if len(candidates) == 1:
        return candidates[0]
    shown = ", ".join(f"{hex(m.id)} {m.title!r} ({m.wm_class})" for m in candidates)
    raise WindowError(f"--window {name!r}: {len(candidates)} windows match: {shown}; give the window's "
                      f"id, e.g. --window {hex(candidates[0].id)}")


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
        return True
    except ValueError:
        return False
