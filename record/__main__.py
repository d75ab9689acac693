"""`dreamcade record env|screen ...`: record gameplay into a store."""

from __future__ import annotations

import argparse
import sys

import yaml

from dreamcade.dataset.__main__ import parse_size
from dreamcade.dataset.errors import boundary
from dreamcade.dataset.store import store_output
from dreamcade.record.gym_game import POLICIES, EnvError, EnvRecording, Recorder
from dreamcade.record.screen import ScreenRecorder, ScreenRecording


def parse_region(text: str) -> tuple[int, int, int, int]:
    """"0,0,1280,720" -> (x, y, width, height) in screen pixels."""
    try:
        x, y, w, h = (int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected X,Y,WIDTH,HEIGHT in pixels, e.g. 0,0,1280,720, "
                                         f"got {text!r}") from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"WIDTH and HEIGHT must be positive, got {text!r}")
    return x, y, w, h


def parse_kwarg(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, yaml.safe_load(value)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, but not the empty ones (None, False, "")."""

    def _get_help_string(self, action):
        if action.default in (None, False, "", []) or action.default is argparse.SUPPRESS:
            return action.help
        return super()._get_help_string(action)


def add_env_parser(sub) -> None:
    d = EnvRecording()
    p = sub.add_parser(
        "env", help="record a gymnasium game played by a bot or by you",
        description="Record a gymnasium game with image frames (Atari via ale-py, ROMs included; "
        "other games through env.render()). Actions are stored one-hot, named by the game's action "
        "meanings (Discrete), or as the game's continuous values (Box). Episodes are marked at "
        "every reset. The last frame of an episode stores action 0 (no action ran after it).",
        formatter_class=HelpFormatter)
    p.add_argument("--env", dest="env_id", default=d.env_id, help="gymnasium env id")
    p.add_argument("--policy", choices=POLICIES, default=d.policy,
                   help="random: uniform actions; sticky: a bot holding random actions for 1 to "
                   "--max-hold frames; careful (Atari): the sticky bot, redrawing a hold that loses a "
                   "life within --lookahead frames; keyboard: you play in a window (arrows/WASD move, "
                   "space/Z fire, Esc stops)")
    p.add_argument("--steps", type=int, default=d.steps, help="frames to record")
    p.add_argument("--out", required=True, help="store to write (a folder, e.g. pong.zarr)")
    p.add_argument("--frameskip", type=int, default=d.frameskip, help="game frames per recorded frame")
    p.add_argument("--size", type=parse_size, default=None,
                   help="resize frames to WIDTHxHEIGHT (default: the game's own size)")
    p.add_argument("--fps", type=float, default=None,
                   help="stored frame rate (default: game rate / frameskip; Atari 60/4 = 15) "
                   "and the keyboard policy's pace")
    p.add_argument("--repeat-action-probability", type=float, default=d.repeat_action_probability,
                   help="ALE sticky actions: chance the emulator repeats the previous action")
    p.add_argument("--max-hold", type=int, default=d.max_hold,
                   help="sticky and careful bots: longest hold, in frames")
    p.add_argument("--lookahead", type=int, default=d.lookahead,
                   help="careful bot: frames each drawn hold is tried ahead on a copy of the game, "
                   "then the idle action (longer than the game takes to count a death)")
    p.add_argument("--keys", default=d.keys,
                   help="keyboard policy: KEY=ACTION pairs, ACTION an index or UP/DOWN/LEFT/RIGHT/FIRE "
                   "(e.g. 'left=0,right=1' for CartPole)")
    p.add_argument("--env-kwarg", action="append", type=parse_kwarg, default=[], metavar="KEY=VALUE",
                   help="extra keyword for gymnasium.make (repeatable)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the game and the bot")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_env)


def cmd_env(args: argparse.Namespace) -> int:
    if args.steps < 1 or args.frameskip < 1:
        raise EnvError("--steps and --frameskip must be at least 1")
    rec = EnvRecording(env_id=args.env_id, policy=args.policy, steps=args.steps, out=args.out,
                       frameskip=args.frameskip, size=args.size, fps=args.fps,
                       repeat_action_probability=args.repeat_action_probability,
                       max_hold=args.max_hold, lookahead=args.lookahead, keys=args.keys, seed=args.seed,
                       overwrite=args.overwrite, env_kwargs=dict(args.env_kwarg))
    output = store_output(rec.out, rec.overwrite, in_place="when_new")  # checked and locked first
    try:
        recorder = Recorder(rec)
    except BaseException:
        output.abort()
        raise
    try:
        out = recorder.run(progress=not args.quiet, output=output)
    except BaseException:
        output.abort()  # nothing once the store was closed: a stopped recording keeps what it holds
        raise
    print(f"wrote {out}  (inspect it with: dreamcade data info {out})")
    return 0


SCREEN_EPILOG = """\
Only the inputs that the control profile names are recorded, and only while recording is on
(not before the start, not while paused, not after the stop; with --window, not while another
window has the focus). Other keys pressed while recording are only counted, by name, so that
the end can say which keys the profile missed. Frames hold the captured pixels only (no mouse
cursor). Examples:
  dreamcade record screen --window "my game" --controls platformer --out runs/me.zarr
  dreamcade record screen --region 0,0,1280,720 --fps 60 --size 256x144 --controls fps --out fps.zarr
  python -m dreamcade.record.square_game &      # a tiny game to try it on
"""


class RawEpilogFormatter(argparse.RawDescriptionHelpFormatter, HelpFormatter):
    """HelpFormatter that keeps the description's and epilog's line breaks."""


def add_screen_parser(sub) -> None:
    d = ScreenRecording()
    p = sub.add_parser(
        "screen", help="record your own game: the screen, with keyboard, mouse and gamepad input",
        description="Capture a monitor, a region or a window at a fixed rate, with the input of\n"
        "every frame read from the devices that the control profile names, into a store.\n"
        "A pause ends an episode; resuming starts the next one.",
        epilog=SCREEN_EPILOG, formatter_class=RawEpilogFormatter)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--monitor", type=int, default=None, metavar="N",
                       help="monitor to capture: 1 is the first (the default), 0 all together")
    where.add_argument("--region", type=parse_region, default=None, metavar="X,Y,W,H",
                       help="screen rectangle to capture, in pixels")
    where.add_argument("--window", default=None, metavar="NAME",
                       help="window to capture (part of its title or class, or its X11 id; when several "
                       "windows match, their ids are listed); it is followed when it moves, and "
                       "recording pauses while another window has the focus")
    p.add_argument("--out", required=True, help="store to write (a folder, e.g. session.zarr)")
    p.add_argument("--controls", default=d.controls, metavar="PROFILE",
                   help="control profile: a TOML file, or a name in configs/controls/ (platformer, fps, gamepad)")
    p.add_argument("--fps", type=float, default=d.fps, help="frames per second (up to 240)")
    p.add_argument("--size", type=parse_size, default="x".join(map(str, d.size)), metavar="WxH",
                   help="stored frame size; captures are resized with area interpolation")
    p.add_argument("--pause-key", default=d.pause_key, help="hotkey: start/pause/resume (a new episode)")
    p.add_argument("--stop-key", default=d.stop_key, help="hotkey: stop and close the store")
    p.add_argument("--countdown", type=float, default=d.countdown, metavar="SECONDS",
                   help="wait this long before the first frame")
    p.add_argument("--wait", action="store_true", help="start paused: the pause key starts recording")
    p.add_argument("--duration", type=float, default=None, metavar="SECONDS",
                   help="stop after this much recording (pauses not counted)")
    p.add_argument("--ignore-focus", action="store_true",
                   help="--window: keep recording while another window has the focus")
    p.add_argument("--queue-seconds", type=float, default=d.queue_seconds,
                   help="frames the writer may fall behind, in seconds, before frames are dropped")
    p.add_argument("--flush-seconds", type=float, default=d.flush_seconds,
                   help="flush at least this often: a killed recorder loses no more than this")
    p.add_argument("--gamepad-hz", type=float, default=d.gamepad_hz, help="gamepad polls per second")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out")
    p.add_argument("--quiet", action="store_true", help="no status line")
    p.set_defaults(func=cmd_screen)


def cmd_screen(args: argparse.Namespace) -> int:
    rec = ScreenRecording(out=args.out, controls=args.controls, monitor=args.monitor, region=args.region,
                          window=args.window, fps=args.fps, size=args.size, pause_key=args.pause_key.lower(),
                          stop_key=args.stop_key.lower(), countdown=args.countdown, wait=args.wait,
                          duration=args.duration, follow_focus=not args.ignore_focus,
                          queue_seconds=args.queue_seconds, flush_seconds=args.flush_seconds,
                          gamepad_hz=args.gamepad_hz, overwrite=args.overwrite, quiet=args.quiet)
    ScreenRecorder(rec).run()
    print(f"wrote {rec.out}  (inspect it with: dreamcade data info {rec.out})")
    return 0


def build_parser(prog: str = "dreamcade record") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog,
                                description="Record gameplay (frames plus the input of every frame) "
                                "into a zarr store that `dreamcade data info` reads.")
    sub = p.add_subparsers(dest="command", required=True)
    add_env_parser(sub)
    add_screen_parser(sub)
    return p


def main(argv: list[str] | None = None, prog: str = "dreamcade record") -> int:
    args = build_parser(prog).parse_args(argv)
    return boundary(lambda: args.func(args), f"stopped; the store at {args.out} holds what was recorded")


if __name__ == "__main__":
    sys.exit(main())
