"""`dreamcade export RUN --out WORLD`: the world folder of a training run (dreamcade.files.world), which
play and eval load on a machine that has never seen the recordings."""

from __future__ import annotations

import argparse
import shlex
import sys

from dreamcade.dataset.errors import boundary, plural


def parse_args(argv=None, prog: str = "dreamcade export") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__)
    p.add_argument("run", help="a run folder (runs/<name>)")
    p.add_argument("--out", required=True, help="the world folder to write")
    p.add_argument("--data", nargs="+", metavar="STORE", help="stores to take start contexts from "
                   "(default: the run's training stores, held-out episodes first)")
    p.add_argument("--report", help="an `eval drift` report of the run (its --out): its figures go in the card")
    p.add_argument("--episodes", type=int, default=8, help="episodes of start contexts kept (default: 8)")
    p.add_argument("--frames", type=int, default=500, help="frames kept of each (default: 500; at most "
                   "24 MB of raw frames in all)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing world folder")
    args = p.parse_args(argv)
    if args.episodes < 1 or args.frames < 2:
        p.error("--episodes must be at least 1 and --frames at least 2")
    return args


def main(argv=None, prog: str = "dreamcade export") -> int:
    args = parse_args(argv, prog)
    return boundary(lambda: run(args, argv), "interrupted: no world written (what was at --out is as it was)")


def run(args: argparse.Namespace, argv) -> int:
    from dreamcade.files.world import export_world

    command = " ".join(["dreamcade", "export", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    info = export_world(args.run, args.out, args.data, args.report, args.episodes, args.frames, command,
                        overwrite=args.overwrite)
    r = info["reference"]
    print(f"wrote {args.out}: {info['name']} at step {info['step']}, {plural(r['episodes'], 'start episode')} "
          f"({r['frames']} frames); play it with `dreamcade play --checkpoint {args.out}`")
    return 0
