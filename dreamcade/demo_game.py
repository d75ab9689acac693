"""The screen demo's game: SuperTux, a side-scrolling platformer from Debian's packages, run in a
virtual X server (Xvfb) and played by a bot that presses keys through xdotool, the way a person's
keyboard would. `dreamcade demo --screen` records it with `dreamcade record screen`.

Why SuperTux: it is free, packaged by Debian (`apt-get install supertux`), runs with SDL's
software renderer on a machine without a GPU, and its view scrolls with the player, which is
what most games a person records do and what the Atari demo never shows. The bot is simple on
purpose (mostly right, jumping often, sometimes running or turning back): the recording should
hold every control pressed many times, not play well.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from dreamcade.dataset.errors import UserError
from dreamcade.record.xvfb import stop_process

EXE = "/usr/games/supertux2"
LEVEL = "/usr/share/games/supertux2/levels/world1/welcome_antarctica.stl"
WINDOW = "SuperTux"
"""Part of the game window's title: what `record screen --window` is given."""
GEOMETRY = (640, 360)
SCREEN = (800, 600)
PACKAGES = {"Xvfb": "xvfb", "xdotool": "xdotool", EXE: "supertux"}
"""Program -> the Debian package that installs it."""

# SuperTux's settings for a demo: no pause when the window loses the focus (no window manager
# gives it back), no vsync (Xvfb has no display to wait for), no sound, a zoomed-in view (sprites
# stay a few pixels large at the training size).
CONFIG = """(supertux-config
  (pause_on_focusloss #f)
  (confirmation_dialog #f)
  (transitions_enabled #f)
  (custom_mouse_cursor #f)
  (video (fullscreen #f) (video "sdl") (vsync #f) (window_width {w}) (window_height {h})
         (window_resizable #f) (magnification 1.25))
  (audio (sound_enabled #f) (music_enabled #f))
)
"""


class GameError(UserError, RuntimeError):
    """The demo's game cannot be installed or started; the message says what to do."""


def missing_programs() -> list[str]:
    return [exe for exe in PACKAGES if shutil.which(exe) is None]


def install_missing() -> None:
    """apt-get install what is missing (as root, or through sudo); otherwise say the command."""
    missing = missing_programs()
    if not missing:
        return
    packages = sorted({PACKAGES[exe] for exe in missing})
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    if shutil.which("apt-get") is None:
        raise GameError(f"the screen demo needs {', '.join(missing)} (Debian packages {' '.join(packages)}); "
                        "install them with your system's package manager and run the demo again")
    if os.geteuid() != 0:
        if shutil.which("sudo") is None:
            raise GameError(f"the screen demo needs {', '.join(missing)}: run `sudo {' '.join(cmd)}` as root, "
                            "then the demo again")
        cmd = ["sudo", *cmd]
    print(f"$ {' '.join(cmd)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(cmd, env=env).returncode != 0:
        raise GameError(f"`{' '.join(cmd)}` failed; install {' '.join(packages)} by hand and run the demo again")
    still = missing_programs()
    if still:
        raise GameError(f"{', '.join(still)} still missing after installing {' '.join(packages)}")


def xdotool(display: str, *args: str) -> str:
    out = subprocess.run(["xdotool", *args], env={**os.environ, "DISPLAY": display},
                         capture_output=True, text=True)
    return out.stdout.strip()


class Game:
    """SuperTux in its own settings folder, on `display`, in a GEOMETRY window; the pointer is put
    over it, which gives it the keyboard under a server without a window manager."""

    def __init__(self, display: str, level: str = LEVEL, timeout: float = 30.0) -> None:
        self.display = display
        self._home = tempfile.TemporaryDirectory(prefix="dreamcade-supertux-")
        Path(self._home.name, "config").write_text(CONFIG.format(w=GEOMETRY[0], h=GEOMETRY[1]))
        env = {**os.environ, "DISPLAY": display, "SDL_AUDIODRIVER": "dummy"}
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [EXE, "--userdir", self._home.name, "--window", "--geometry", "x".join(map(str, GEOMETRY)),
             "--renderer", "sdl", "--disable-sound", "--disable-music", level],
            env=env, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self.window = self._wait_window(timeout)
        except BaseException:
            self.close()
            raise
        w, h = GEOMETRY
        x, y = (SCREEN[0] - w) // 2, (SCREEN[1] - h) // 2
        xdotool(display, "mousemove", str(x + w // 2), str(y + h // 2))

    def _wait_window(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.seek(0)
                tail = self._log.read().decode(errors="replace")[-400:]
                raise GameError(f"{EXE} exited (code {self.proc.returncode}) before its window opened: {tail}")
            found = xdotool(self.display, "search", "--onlyvisible", "--name", WINDOW)
            if found:
                return found.split()[0]
            time.sleep(0.2)
        raise GameError(f"{EXE} opened no window within {timeout:.0f} s")

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        stop_process(self.proc)
        self._log.close()
        self._home.cleanup()

    def __enter__(self) -> Game:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# (keys held, weight, shortest and longest hold in seconds): mostly right, sometimes running with
# the action key, turning back, ducking or standing still
MOVES = (
    (("Right",), 5.0, 0.4, 2.0),
    (("Right", "Control_L"), 2.0, 0.4, 1.5),
    (("Left",), 1.5, 0.2, 0.8),
    ((), 1.0, 0.2, 0.8),
    (("Down",), 0.4, 0.2, 0.6),
    (("Up",), 0.3, 0.1, 0.4),
)
JUMP_CHANCE = 0.08
"""Chance per tick (0.05 s) of a jump; a jump holds space 0.1 to 0.6 s (longer jumps higher)."""
TICK = 0.05


class Bot:
    """Plays through xdotool key presses on `display` (the focused window gets them) until
    stop(); `presses` counts the presses it sent, by key."""

    def __init__(self, display: str, seed: int = 0) -> None:
        self.display, self.rng = display, random.Random(seed)
        self.presses: dict[str, int] = {}
        self._held: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Bot:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _set(self, keys: set[str]) -> None:
        up, down = self._held - keys, keys - self._held
        if up:
            xdotool(self.display, "keyup", *sorted(up))
        if down:
            xdotool(self.display, "keydown", *sorted(down))
            for k in down:
                self.presses[k] = self.presses.get(k, 0) + 1
        self._held = set(keys)

    def _run(self) -> None:
        weights = [m[1] for m in MOVES]
        try:
            while not self._stop.is_set():
                i = self.rng.choices(range(len(MOVES)), weights)[0]
                keys, _, low, high = MOVES[i]
                end = time.monotonic() + self.rng.uniform(low, high)
                jump_until = 0.0
                while time.monotonic() < end and not self._stop.is_set():
                    now = time.monotonic()
                    if now >= jump_until and self.rng.random() < JUMP_CHANCE:
                        jump_until = now + self.rng.uniform(0.1, 0.6)
                    self._set(set(keys) | ({"space"} if now < jump_until else set()))
                    time.sleep(TICK)
        finally:
            self._set(set())
