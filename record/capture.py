"""What the screen recorder grabs: a monitor, a region, or a window (followed when it moves), and
the grab itself (mss, then OpenCV's area resize)."""

from __future__ import annotations

import cv2
import numpy as np

from dreamcade.dataset.errors import UserError


class CaptureError(UserError, RuntimeError):
    """The rectangle to capture cannot be found; the message names the option and the fix."""


class Target:
    """The screen rectangle to grab, in screen pixels. A window's rectangle keeps the size the
    window had at the start and follows its position; `focused()` says whether it has the
    keyboard focus (always True for a monitor or a region, or with follow_focus off)."""

    def __init__(self, sct, *, monitor: int | None = None, region: tuple[int, int, int, int] | None = None,
                 window: str | None = None, follow_focus: bool = True) -> None:
        s = sct.monitors[0]  # the whole virtual screen
        self.screen = (s["left"], s["top"], s["width"], s["height"])
        self.window = None
        if window is not None:
            self._open_window(window)
        elif region is not None:
            self.rect = self._inside(region, f"--region {','.join(map(str, region))}")
            self.source = {"region": list(self.rect)}
        else:
            self._monitor(sct, 1 if monitor is None else monitor)
        self.size = self.rect[2:]
        self.follow_focus = follow_focus and self.window is not None

    def _monitor(self, sct, n: int) -> None:
        count = len(sct.monitors) - 1
        if not 0 <= n <= count:
            raise CaptureError(f"--monitor {n}: this screen has {count} monitor(s); use 1 to {count}, "
                               "or 0 for all of them together")
        m = sct.monitors[n]
        self.rect = (m["left"], m["top"], m["width"], m["height"])
        self.source = {"monitor": n, "region": list(self.rect)}

    def _open_window(self, name: str) -> None:
        from dreamcade.record.x11 import WindowError, X11Window

        try:
            self.window = X11Window(name)
        except WindowError as e:
            raise CaptureError(str(e)) from None
        g = self.window.geometry()
        if g is None:
            raise CaptureError(f"--window {name!r}: window {hex(self.window.id)} is not on screen")
        x, y, w, h = g
        sx, sy, sw, sh = self.screen
        x0, y0, x1, y1 = max(x, sx), max(y, sy), min(x + w, sx + sw), min(y + h, sy + sh)
        if x1 <= x0 or y1 <= y0:
            raise CaptureError(f"--window {name!r}: the window ({w}x{h} at {x},{y}) is off the screen")
        self.rect = (x0, y0, x1 - x0, y1 - y0)
        self.source = {"window": self.window.title, "window_class": self.window.match.wm_class,
                       "window_id": hex(self.window.id), "region": list(self.rect)}

    def _inside(self, rect: tuple[int, int, int, int], what: str) -> tuple[int, int, int, int]:
        x, y, w, h = rect
        sx, sy, sw, sh = self.screen
        if x < sx or y < sy or x + w > sx + sw or y + h > sy + sh:
            raise CaptureError(f"{what}: extends past the screen ({sw}x{sh} at {sx},{sy}); "
                               "give X,Y,WIDTH,HEIGHT inside it")
        return rect

    def region(self) -> dict:
        """The rectangle as mss wants it."""
        x, y, w, h = self.rect
        return {"left": x, "top": y, "width": w, "height": h}

    def follow(self) -> bool:
        """Move the rectangle with the window (same size, kept on screen); False once the window
        is gone."""
        if self.window is None:
            return True
        g = self.window.geometry()
        if g is None:
            return False
        sx, sy, sw, sh = self.screen
        w, h = self.size
        self.rect = (min(max(g[0], sx), sx + sw - w), min(max(g[1], sy), sy + sh - h), w, h)
        return True

    def focused(self) -> bool | None:
        """Whether recording may go on as far as the focus goes; None when X could not tell."""
        return self.window.focused() if self.follow_focus else True

    def describe(self) -> str:
        x, y, w, h = self.rect
        if self.window is not None:
            return f"window {hex(self.window.id)} {self.window.title!r} ({w}x{h} at {x},{y})"
        if "monitor" in self.source:
            return f"monitor {self.source['monitor']} ({w}x{h} at {x},{y})"
        return f"region {w}x{h} at {x},{y}"

    def close(self) -> None:
        if self.window is not None:
            self.window.close()


def grab(sct, region: dict, size: tuple[int, int]) -> np.ndarray:
    """One frame: uint8 RGB [H, W, 3] at `size` (width, height), area-resized from the capture
    (mss gives BGRA; resizing the four channels first keeps the colour conversion small)."""
    shot = sct.grab(region)
    bgra = np.frombuffer(shot.raw, np.uint8).reshape(shot.height, shot.width, 4)
    if (shot.width, shot.height) != tuple(size):
        bgra = cv2.resize(bgra, tuple(size), interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(bgra, cv2.COLOR_BGRA2RGB)
