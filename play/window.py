"""The play window: Player, the real-time loop (read input -> step the world model, and the real
game beside it -> draw the scaled frames and the HUD -> pace to the fps cap), its hotkeys, the
help overlay, screenshots and saved sessions; and Options, the window's settings."""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dreamcade.dataset.errors import UserError
from dreamcade.dataset.outputs import Output
from dreamcade.dataset.store import store_output
from dreamcade.model.world_env import WorldModelEnv
from dreamcade.model.config import STEPS, context_noise_used
from dreamcade.play import PlayError
from dreamcade.play.contexts import Contexts
from dreamcade.play.health_meter import Health
from dreamcade.play.live import HOTKEYS, LiveInput, hotkey_map
from dreamcade.play.real_game import RealGame
from dreamcade.play.session import Session

os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

NOISE_STEP = 0.05
HUD_LINE, HUD_FONT, HUD_MIN_WIDTH = 14, 18, 400  # pixels


class Quit(Exception):
    """The player asked to stop (Esc, the window closed)."""


@dataclass
class Options:
    scale: int = 8
    """Window pixels per frame pixel."""
    fps: float = 30.0
    """Frame-rate cap (0: as fast as the model runs)."""
    smooth: bool = False
    """Smooth scaling instead of nearest-neighbour."""
    save_dir: Path = Path("sessions")
    """Where screenshots and saved sessions go."""
    episode: int | None = None
    seed: int | None = None
    name: str = "play"
    video: Path | None = None
    """Record what the window shows, one video frame per generated frame, to this .mp4 or .gif."""
    video_hud: bool = False
    """Keep the HUD in the video (by default only the game panels)."""


class Player:
    """The real-time loop: read input -> step the model (and the real game) -> draw -> pace."""

    def __init__(self, env: WorldModelEnv, contexts: Contexts, live: LiveInput, opts: Options,
                 real: RealGame | None = None, source: dict | None = None, messages: list[str] = ()) -> None:
        import pygame as pg

        self.pg, self.env, self.contexts, self.live, self.opts, self.real = pg, env, contexts, live, opts, real
        self.source = source or {}
        self.keys, shadowed = hotkey_map(live.keys)
        self.health = Health(contexts.sample_frames())
        self.paused = self.help = self.single = False
        self.hud, self.view = True, "both" if real else "model"
        self.session: Session | None = None
        self.frames_done, self.model_ms, self.fps_now = 0, 0.0, 0.0
        self.shown = deque(maxlen=31)  # times of the last frames generated, for the fps figure
        self.stats = {"frames": 0, "model_s": 0.0, "loop_s": 0.0}
        self.message, self.message_until = "", 0.0
        self.resets = 0
        self.video, self.video_shape, self.video_written = None, None, -1
        pg.display.init()
        driver = pg.display.get_driver()
        if driver in ("offscreen", "dummy") and os.environ.get("SDL_VIDEODRIVER") != driver:
            pg.display.quit()
            raise PlayError(f"no display to open the window on (SDL fell back to its {driver} driver): run "
                            "in a desktop session (on Linux with DISPLAY set), or set SDL_VIDEODRIVER=dummy "
                            "to play without a window")
        pg.font.init()
        self.font = pg.font.Font(None, HUD_FONT)
        self.reset(opts.episode)
        self.screen = self._open_window()
        for m in [*messages, *shadowed]:
            self.say(m)
        live.feed([])  # starts the gamepad reader, which says whether a pad is there
        if live.needs_pad and live.pad.pad is None:
            self.say("the model reads a gamepad but none is connected: plug one in at any time; "
                     "until then its controls stay at rest")
        self.say(f"playing {opts.name}: H shows the controls, Esc quits")

    # -- state changes ---------------------------------------------------------------------------

    def say(self, text: str) -> None:
        print(f"play: {text}", file=sys.stderr, flush=True)
        self.message, self.message_until = text, time.monotonic() + 4.0

    def reset(self, episode: int | None = None) -> None:
        frames, actions, mask, where = self.contexts.pick(episode)
        self.frame = self.env.reset(frames, actions, mask)[0].numpy()
        self.context_from = where
        self.real_frame = self.real.reset(None if self.resets else self.opts.seed) if self.real else None
        self.resets += 1
        self.health.reset()
        if self.session is not None:
            self.session.begin(frames[mask], actions[mask[:-1]], time.monotonic())

    def _new_path(self, suffix: str) -> Path:
        """A free file name in the save folder: <run>-<date>-<time>[-k]<suffix>."""
        self.opts.save_dir.mkdir(parents=True, exist_ok=True)
        stem = f"{self.opts.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        k = 1
        while (path := self.opts.save_dir / f"{stem}{f'-{k}' if k > 1 else ''}{suffix}").exists():
            k += 1
        return path

    def start_saving(self, path: Path | None = None, output: Output | None = None) -> None:
        """Save the session from now on to `path` (its store_output opened by the caller), or to a
        new store in the save folder."""
        path = path or self._new_path(".zarr")
        output = output or store_output(path, in_place="when_new", option="F9", can_overwrite=False)
        h, w = self.frame.shape[:2]
        s = self.env.sampler
        source = {**self.source, "kind": "play", "context": int(self.env.mask[0].sum().item()),
                  "context_from": self.context_from if self.env.t == 0 else "generated",
                  "sampler": {"steps": s.steps, "context_noise": s.context_noise, "method": s.method,
                              "guidance": s.guidance, "guidance_rescale": s.guidance_rescale}}
        self.session = Session(path, self.env.model.spec, self.contexts.first.fps, (w, h), source, output)
        L = self.env.L
        ctx = self.env.frames_uint8()[0]
        keep = self.env.mask[0].cpu().numpy()
        self.session.begin(ctx[keep], self.env.actions[0, : L - 1].cpu().numpy()[keep[:-1]], time.monotonic())
        self.say(f"saving the session to {path}")

    def stop_saving(self) -> None:
        n, path = self.session.close(), self.session.path
        self.session = None
        self.say(f"saved {n} frames to {path} (`dreamcade data info {path}`)")

    def on_hotkey(self, name: str) -> None:
        s, pg = self.env.sampler, self.pg
        if name == "quit":
            raise Quit
        if name == "help":
            self.help = not self.help
            if self.help:
                print("\n".join(self.help_lines()), file=sys.stderr)
        elif name == "reset":
            self.reset(self.opts.episode)
        elif name == "pause":
            self.paused = not self.paused
            self.shown.clear()
            self._grab(not self.paused)
        elif name == "step":
            self.single = self.paused
        elif name in ("steps_down", "steps_up"):
            s.steps = int(np.clip(s.steps + (1 if name == "steps_up" else -1), *STEPS))
        elif name in ("noise_down", "noise_up"):
            top = self.env.model.diffusion.context_noise_max
            change = NOISE_STEP if name == "noise_up" else -NOISE_STEP
            s.context_noise = round(context_noise_used(s.context_noise + change, top), 3)
        elif name == "save":
            try:
                self.stop_saving() if self.session else self.start_saving()
            except (UserError, OSError) as e:
                self.say(f"cannot save the session: {e}")
        elif name == "hud":
            self.hud = not self.hud
            self.screen = self._open_window()
        elif name == "view":
            self._next_view()
        elif name == "screenshot":
            try:
                path = self._new_path(".png")
                pg.image.save(self.screen, str(path))
                self.say(f"screenshot saved: {path}")
            except (OSError, pg.error) as e:
                self.say(f"cannot save the screenshot: {e}")

    def _next_view(self) -> None:
        if self.real is None:
            self.say("no real game to show (see the message at the start)")
            return
        views = ("both", "model", "real")
        self.view = views[(views.index(self.view) + 1) % 3]
        self.screen = self._open_window()

    def _grab(self, on: bool) -> None:
        """Mouse-look games get the mouse grabbed (relative motion, no pointer) while playing."""
        if self.live.mouse_motion:
            try:
                self.pg.mouse.set_relative_mode(on)
            except self.pg.error:
                self.pg.event.set_grab(on)

    # -- the loop --------------------------------------------------------------------------------

    def run(self, frames: int | None = None, before_frame=None) -> int:
        """Play until quit (or `frames` generated frames); before_frame(i), if given, is called
        at the top of each loop turn (tests post events there). Returns the frames generated."""
        self._grab(True)
        t0 = next_t = time.perf_counter()
        turn = 0
        try:
            while frames is None or self.frames_done < frames:
                if before_frame is not None:
                    before_frame(turn)
                turn += 1
                self.handle(self.pg.event.get())
                if not self.paused or self.single:
                    self.step()
                    self.single = False
                self.draw()
                next_t = self.pace(next_t)
        except Quit:
            pass
        finally:  # Ctrl-C too: the time played is known
            self.stats["loop_s"] += time.perf_counter() - t0
        return self.frames_done

    def handle(self, events: list) -> None:
        pg = self.pg
        for ev in events:
            if ev.type == pg.QUIT:
                raise Quit
            if ev.type == pg.WINDOWFOCUSLOST:
                self.live.release()
        for name in self.live.feed(events):
            if name in self.keys:
                self.on_hotkey(self.keys[name])

    def step(self) -> None:
        action = self.live.action()
        t0 = time.perf_counter()
        frame = self.env.step(action)[0].numpy()
        dt = time.perf_counter() - t0
        self.stats["model_s"] += dt
        self.model_ms = dt * 1000 if not self.frames_done else 0.9 * self.model_ms + 100 * dt
        if self.real is not None:
            self.real_frame = self.real.step(action)
        if self.session is not None:
            self.session.add(action, self.live.last_events, frame, time.monotonic())
        self.frame = frame
        self.health.update(frame)
        self.frames_done += 1
        self.shown.append(time.perf_counter())
        if len(self.shown) > 1:
            self.fps_now = (len(self.shown) - 1) / max(self.shown[-1] - self.shown[0], 1e-6)
        self.stats["frames"] = self.frames_done

    def pace(self, next_t: float) -> float:
        """Sleep until the next frame's deadline under the fps cap; a late frame moves the schedule."""
        now = time.perf_counter()
        next_t += 1.0 / self.opts.fps if self.opts.fps > 0 else 0.0
        if next_t < now:
            return now
        time.sleep(next_t - now)
        return next_t

    # -- drawing ---------------------------------------------------------------------------------

    def panels(self) -> list[tuple[str, np.ndarray]]:
        model, real = ("model", self.frame), ("real game", self.real_frame)
        return {"model": [model], "real": [real], "both": [model, real]}[self.view]

    def _open_window(self):
        h, w = self.frame.shape[:2]
        n = len(self.panels())
        width = n * w * self.opts.scale + (n - 1) * 4
        height = h * self.opts.scale + (4 * HUD_LINE + 6 if self.hud else 0)
        screen = self.pg.display.set_mode((max(width, HUD_MIN_WIDTH if self.hud else 0), height))
        self.pg.display.set_caption(f"dreamcade play: {self.opts.name}")
        return screen

    def draw(self) -> None:
        pg, screen = self.pg, self.screen
        screen.fill((0, 0, 0))
        h, w = self.frame.shape[:2]
        size = (w * self.opts.scale, h * self.opts.scale)
        scale = pg.transform.smoothscale if self.opts.smooth else pg.transform.scale
        for i, (_, frame) in enumerate(self.panels()):
            surf = pg.image.frombuffer(np.ascontiguousarray(frame).tobytes(), (w, h), "RGB")
            screen.blit(scale(surf, size), (i * (size[0] + 4), 0))
        if self.hud:
            self._text(self.hud_lines(), (4, size[1] + 3))
        if self.help:
            shade = pg.Surface(screen.get_size(), pg.SRCALPHA)
            shade.fill((0, 0, 0, 210))
            screen.blit(shade, (0, 0))
            self._text(self.help_lines(), (6, 4))
        if self.video is not None and self.video_written != self.frames_done:
            self._record(size)
        pg.display.flip()

    def _record(self, size: tuple[int, int]) -> None:
        """Append what the window shows (the panels, or the whole window with --video-hud) to the
        clip; a window that changes size (V, the HUD) is cropped or padded to the first size."""
        shot = self.pg.surfarray.array3d(self.screen).transpose(1, 0, 2)
        if not self.opts.video_hud:
            shot = shot[:size[1], :len(self.panels()) * (size[0] + 4) - 4]
        if self.video_shape is None:
            self.video_shape = shot.shape
        canvas = np.zeros(self.video_shape, np.uint8)
        h, w = min(shot.shape[0], canvas.shape[0]), min(shot.shape[1], canvas.shape[1])
        canvas[:h, :w] = shot[:h, :w]
        self.video.put(canvas)
        self.video_written = self.frames_done

    def _text(self, lines: list[tuple[str, tuple]] | list[str], at: tuple[int, int]) -> None:
        for i, line in enumerate(lines):
            text, colour = line if isinstance(line, tuple) else (line, (230, 230, 230))
            self.screen.blit(self.font.render(text, True, colour), (at[0], at[1] + i * HUD_LINE))

    def hud_lines(self) -> list[tuple[str, tuple]]:
        s, grey, red = self.env.sampler, (220, 220, 220), (255, 90, 70)
        state = "PAUSED  " if self.paused else ""
        saving = f"SAVING {self.session.writer.n_frames} frames  " if self.session else ""
        health = "n/a" if self.health.value is None else f"{self.health.value:.2f}"
        up = self.env.upsampling
        stage2 = "" if up is None else f"  upsampler x{up.scale} {up.sampler.steps} {up.sampler.method}"
        lines = [(f"{state}{self.fps_now:5.1f} fps  model {self.model_ms:5.1f} ms/frame  steps {s.steps} {s.method}  "
                  f"noise {s.context_noise:.2f}{stage2}", grey),
                 (f"{saving}frame {self.frames_done}  health {health} (sharpness vs real)  "
                  f"views: {' | '.join(n for n, _ in self.panels())}", grey)]
        warning = self.health.warning
        lines.append((f"WARNING: {warning}", red) if warning else ("H: help", (150, 150, 150)))
        if time.monotonic() < self.message_until:
            lines.append((self.message, (250, 220, 120)))
        return lines

    def help_lines(self) -> list[str]:
        keys = {}
        for k, name in self.keys.items():
            keys.setdefault(name, []).append(k)
        lines = ["controls of the game:", *("  " + x for x in self.live.describe()), "window:"]
        lines += [f"  {' / '.join(keys[n]):<9} {what}" for n, _, what in HOTKEYS if n in keys]
        return lines

    def start_video(self, path: Path, output: Output) -> None:
        """Record the window to `path` (its clip_output, opened by the caller) from now until close()."""
        self.video = Clip(path, output, self.opts.fps or self.contexts.first.fps)
        self.say(f"recording the window to {path}")

    def close(self) -> None:
        if self.session is not None:
            self.stop_saving()
        if self.video is not None:
            n = self.video.close()
            self.say(f"wrote {self.video.path}: {n} frames" if n else "no video written: no frame was generated")
        self.live.close()
        if self.real is not None:
            self.real.close()
        self.pg.display.quit()


class Clip:
    """The window's frames streamed to eval.video.write_clip on a thread of its own (encoding
    never stalls the loop); the file appears when close() has written it whole."""

    def __init__(self, path: Path, output: Output, fps: float) -> None:
        import queue
        import threading

        from dreamcade.eval.video import write_clip

        self.path, self.output, self.n = Path(path), output, 0
        self.queue: queue.Queue = queue.Queue(maxsize=64)
        self.error: Exception | None = None

        def frames():
            while (frame := self.queue.get()) is not None:
                yield frame

        def work():
            try:
                self.n = write_clip(self.output.path, frames(), fps)
            except Exception as e:  # an unwritable folder: said at close, play goes on
                self.error = e
                for _ in frames():
                    pass
        self.thread = threading.Thread(target=work, name="clip", daemon=True)
        self.thread.start()

    def put(self, frame: np.ndarray) -> None:
        self.queue.put(frame)

    def close(self) -> int:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None or self.n == 0:
            self.output.abort()
        if self.error is not None:
            raise PlayError(f"--video {self.path}: not written ({self.error})")
        if self.n:
            self.output.commit()
        return self.n

