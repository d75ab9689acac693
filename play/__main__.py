"""Play the generated game: `dreamcade play --checkpoint runs/<name>` (or `python play.py ...`).

A pygame-ce window shows the world model's frames, scaled up, generated as fast as the model
allows up to --fps from your keyboard, mouse or gamepad, read through the checkpoint's control
spec (keys the spec does not read do nothing). It starts from real frames of an episode of a
store: by default the checkpoint's own validation episodes. When the model was trained on a
gymnasium game that is installed, the real game runs beside it on the same input.
"""

# The window is play.window.Player; this module reads the command line and builds it. What
# needs torch or pygame is imported when the game starts, so --help is instant.

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dreamcade.dataset.errors import boundary, plural
from dreamcade.dataset.outputs import check_apart
from dreamcade.model.config import STEPS, Config, ConfigError, SamplerConfig, check_guided, sampler_settings
from dreamcade.model.runtime import Runtime
from dreamcade.play import PlayError
from dreamcade.play.live import HOTKEYS

if TYPE_CHECKING:
    from dreamcade.dataset.controls import ControlSpec
    from dreamcade.play.contexts import Contexts
    from dreamcade.play.real_game import RealGame
    from dreamcade.play.window import Player


def parse_args(argv=None, prog: str = "dreamcade play") -> argparse.Namespace:
    hot = "\n".join(f"  {' / '.join(k):<9} {what}" for _, k, what in HOTKEYS)
    p = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"game input:\n  discrete games (Atari): arrows or WASD move, space or Z fire (--keys to change);\n"
        "  gamepad d-pad / left stick move, A or B fire.\n  recorded controls (keys, mouse, gamepad): "
        "the keys and devices named in the checkpoint's\n  control spec; the mouse is grabbed when "
        f"the spec reads its motion.\n\nwindow keys (a key the game uses goes to the game; the other "
        f"key still works):\n{hot}\n\nHUD: frames/s, ms per model frame, sampler steps, context "
        "noise, frame count, and a health\nfigure (sharpness of the generated frames over that of "
        "the real data: 1 is like the\ndata; below 0.5 or above 2 it warns that the frames are going bad).")
    p.add_argument("--checkpoint", required=True, help="a world folder (dreamcade export), a run folder "
                   "(runs/<name>)")
    p.add_argument("--data", default=None, metavar="STORE", help="store to take the first real frames "
                   "from (default: a world's own starts, or a run's validation episodes)")
    p.add_argument("--episode", type=int, default=None, metavar="N",
                   help="start in episode N of those (default: a random one)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"sampler steps per frame, {STEPS[0]}-{STEPS[1]} (default: the checkpoint's)")
    p.add_argument("--method", default=None,
                   help="sampler method: euler (one network call a step) or heun (two, but the last) "
                        "(default: the checkpoint's)")
    p.add_argument("--upsampler-steps", type=int, default=None,
                   help="a two-stage world's upsampler: its sampler steps per frame (default: the world's "
                        "upsampler.sampler_steps)")
    p.add_argument("--context-noise", type=float, default=None, help="context noise level (default: the checkpoint's)")
    p.add_argument("--guidance", type=float, default=None,
                   help="guidance on the input, 1 (off) or more: two network calls a step; needs a model "
                        "trained with diffusion.action_drop (default: the checkpoint's sampler.guidance)")
    p.add_argument("--guidance-rescale", type=float, default=None,
                   help="with guidance: the share of each guided step scaled back to the spread of the frame "
                        "with the keys, 0 (off) to 1 (default: the checkpoint's sampler.guidance_rescale)")
    p.add_argument("--hold-levels", type=float, default=None,
                   help="a generated pixel within this many levels of the frame before keeps its value "
                        "(default: the checkpoint's sampler.hold_levels; 0: off)")
    p.add_argument("--scale", type=int, default=8, help="window pixels per frame pixel (default: 8)")
    p.add_argument("--smooth", action="store_true", help="smooth scaling (default: nearest neighbour)")
    p.add_argument("--fps", type=float, default=None, help="frame-rate cap, 0 for none (default: the "
                   "data's rate: one model frame is one frame of the data)")
    p.add_argument("--keys", default="", help="discrete games: KEY=ACTION pairs instead of arrows/WASD/space, "
                   "e.g. left=LEFT,space=FIRE or left=0,right=1")
    p.add_argument("--real", action=argparse.BooleanOptionalAction, default=True,
                   help="show the real game beside the model when it can be rebuilt (default: on)")
    p.add_argument("--save", default=None, metavar="STORE", help="save the session to this store from the start")
    p.add_argument("--video", default=None, metavar="CLIP", help="record what the window shows to this .mp4 "
                   "or .gif, one video frame per generated frame, at the window's scale")
    p.add_argument("--video-hud", action="store_true", help="keep the HUD in the --video clip (default: the game only)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --video clip (only a clip)")
    p.add_argument("--save-dir", default="sessions", help="folder for screenshots and sessions saved with F9")
    p.add_argument("--frames", type=int, default=None, help="stop after this many generated frames")
    p.add_argument("--seed", type=int, default=None, help="seed for the context choice and the sampler noise")
    Runtime.add_options(p)
    args = p.parse_args(argv)
    if args.scale < 1 or (args.fps is not None and args.fps < 0):
        p.error("--scale must be at least 1 and --fps at least 0")
    try:  # before the model loads; settings() applies them to the checkpoint's sampler
        sampler_settings(SamplerConfig(), args.steps, args.context_noise, args.hold_levels, args.method,
                         args.guidance, args.guidance_rescale)
    except ConfigError as e:
        p.error(str(e))
    return args


def build(args: argparse.Namespace) -> Player:
    """Everything the loop needs, from the command line; raises PlayError (and the loaders' errors)."""
    if args.video and Path(args.video).suffix.lower() not in (".mp4", ".gif"):
        raise PlayError(f"--video {args.video}: a clip is a .mp4 or a .gif")
    outputs = Outputs(args)  # checked and locked before anything loads; removed again on any error
    try:
        player = build_player(args, outputs)
    except BaseException:
        outputs.abort()
        raise
    return player


class Outputs:
    """--save and --video as outputs (dataset.outputs): never an input, inside one or around one,
    never an existing file or folder (--overwrite lets --video replace a clip)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from dreamcade.dataset.store import store_output
        from dreamcade.eval.video import clip_output

        world_ref = Path(args.checkpoint) / "reference.zarr"
        self.inputs = [p for p in (args.data, world_ref if world_ref.exists() else None) if p]
        self.video = None
        self.save = store_output(args.save, False, self.inputs, "--save", "when_new", False) if args.save else None
        try:
            self.video = clip_output(args.video, args.overwrite, self.inputs, "--video") if args.video else None
        except BaseException:
            self.abort()
            raise

    def check_apart(self, stores: list[str]) -> None:
        """Also apart from the checkpoint's training stores, known once it is loaded."""
        for opt, o in (("--save", self.save), ("--video", self.video)):
            if o is not None:
                check_apart(o.target, stores, opt)

    def abort(self) -> None:
        for o in (self.save, self.video):
            if o is not None:
                o.abort()


def build_player(args: argparse.Namespace, outputs: Outputs) -> Player:
    from dreamcade.files.frames import check_frames
    from dreamcade.files.inference import load_for_inference
    from dreamcade.model.upsampler import upsampler_steps
    from dreamcade.model.world_env import WorldModelEnv
    from dreamcade.play.contexts import Contexts
    from dreamcade.play.live import LiveInput, input_messages
    from dreamcade.play.window import Options, Player
    from dreamcade.record.policies import parse_keymap

    runtime = Runtime.from_args(args)
    runtime.apply_threads()
    model, cfg, meta, device, speed, upsampling = load_for_inference(args.checkpoint, runtime)
    outputs.check_apart(cfg.data.stores)
    sampler = sampler_settings(cfg.sampler, steps=args.steps, context_noise=args.context_noise,
                               hold_levels=args.hold_levels, method=args.method, guidance=args.guidance,
                               guidance_rescale=args.guidance_rescale)
    check_guided(sampler.guidance, model.diffusion.action_drop, "--guidance")
    spec = model.spec
    try:
        keymap = parse_keymap(args.keys, spec.names) if args.keys and spec.exclusive else None
    except ValueError as e:  # a --keys mistake
        raise PlayError(str(e)) from None
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    start = args.data or (cfg.data.stores[0] if "world" in meta and cfg.data.stores else None)  # a world: all of its starts
    contexts = Contexts.load(start, spec, cfg.data.context, cfg.data.stores, cfg.data.val_fraction, seed)
    check_frames(contexts.first, model, cfg)
    env = WorldModelEnv(model, sampler, device, seed, speed, upsampler_steps(upsampling, args.upsampler_steps))
    try:
        live = LiveInput(spec, keymap, on_change=lambda text: print(f"play: {text}", file=sys.stderr))
    except ValueError as e:  # a key name the window does not know
        raise PlayError(str(e)) from None
    messages = input_messages(spec, live, args.keys)
    n = len(contexts.episodes)
    if args.episode is not None and not 0 <= args.episode < n:
        raise PlayError(f"--episode {args.episode}: {plural(n, 'episode')} to start from (0 to {n - 1})")
    real = None
    if args.real:
        real, why = real_game(cfg, spec, contexts)
        messages.append(why)
    if args.compile:
        messages.append("compiling the network: the first frames take a while")
    run = Path(args.checkpoint)
    name = (run.parent.name if run.suffix == ".safetensors" else run.name) or "play"
    opts = Options(scale=args.scale, fps=contexts.first.fps if args.fps is None else args.fps,
                   smooth=args.smooth, save_dir=Path(args.save_dir), episode=args.episode, seed=seed, name=name,
                   video_hud=args.video_hud)
    source = {"checkpoint": str(args.checkpoint), "checkpoint_step": int(meta.get("step", 0)),
              "device": str(device), "seed": seed}
    player = Player(env, contexts, live, opts, real, source, messages)
    if outputs.save:
        player.start_saving(Path(args.save), outputs.save)
    if outputs.video:
        player.start_video(Path(args.video), outputs.video)
    return player


def real_game(cfg: Config, spec: ControlSpec, contexts: Contexts) -> tuple[RealGame | None, str]:
    """The game of the checkpoint's own data when it is here, else of --data, at the frames' size;
    or None, and why not."""
    from dreamcade.files.frames import training_store
    from dreamcade.play.real_game import RealGame

    origin = training_store(cfg) or contexts.first
    h, w = contexts.first.frame_shape[:2]
    return RealGame.find(origin, spec, (w, h))


def say_speed(stats: dict) -> None:
    """One line at the end: frames played, the loop's frames/s (capped by --fps) and the model's
    share of each frame."""
    n, loop = stats["frames"], stats["loop_s"]
    if n and loop > 0:
        print(f"play: {n} frames in {loop:.1f} s, {n / loop:.1f} frames/s; the model took "
              f"{stats['model_s'] / n * 1000:.0f} ms a frame", file=sys.stderr, flush=True)


def main(argv=None, prog: str = "dreamcade play") -> int:
    args = parse_args(argv, prog)
    return boundary(lambda: run(args))


def run(args: argparse.Namespace) -> int:
    import pygame

    try:
        player = build(args)
    except pygame.error as e:
        raise PlayError(f"cannot open a window ({e}); run in a desktop session (DISPLAY set on Linux), "
                        "or set SDL_VIDEODRIVER=dummy to play without one") from None
    wm = pygame.display.get_wm_info().get("window")
    print(f"play: window ready{f' (X11 window {wm:#x})' if isinstance(wm, int) else ''}", file=sys.stderr, flush=True)
    try:
        player.run(args.frames)
    except KeyboardInterrupt:
        pass
    finally:
        say_speed(player.stats)
        try:
            player.close()
        except PlayError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
