"""`python -m record env ...`: record gameplay into a store."""

from __future__ import annotations

import argparse
import sys

import yaml

from dataset.store import StoreError
from record.env import POLICIES, EnvRecording, Recorder


def parse_size(text: str) -> tuple[int, int]:
    """"64x64" -> (64, 64); "256x144" -> (256, 144) as (width, height)."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be WIDTHxHEIGHT, e.g. 64x64, got {text!r}") from None
    if w <= 0 or h <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}")
    return w, h


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
                   "--max-hold frames; keyboard: you play in a window (arrows/WASD move, space/Z fire, "
                   "Esc stops)")
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
    p.add_argument("--max-hold", type=int, default=d.max_hold, help="sticky bot: longest hold, in frames")
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
        print("error: --steps and --frameskip must be at least 1", file=sys.stderr)
        return 2
    rec = EnvRecording(env_id=args.env_id, policy=args.policy, steps=args.steps, out=args.out,
                       frameskip=args.frameskip, size=args.size, fps=args.fps,
                       repeat_action_probability=args.repeat_action_probability,
                       max_hold=args.max_hold, keys=args.keys, seed=args.seed,
                       overwrite=args.overwrite, env_kwargs=dict(args.env_kwarg))
    try:
        out = Recorder(rec).run(progress=not args.quiet)
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\nstopped; the store at {rec.out} holds what was recorded", file=sys.stderr)
        return 130
    print(f"wrote {out}  (inspect it with: python -m dataset info {out})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m record",
                                description="Record gameplay (frames plus the input of every frame) "
                                "into a zarr store that `python -m dataset info` reads.")
    sub = p.add_subparsers(dest="command", required=True)
    add_env_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
