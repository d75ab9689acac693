"""`dreamcade export RUN --out WORLD`: the world folder of a training run (model.world), which
play and eval load on a machine that has never seen the recordings."""

from __future__ import annotations

import argparse
import shlex
import sys

from dataset import StoreError
from dataset.controls import SpecError
from model.checkpoint import CheckpointError


def parse_args(argv=None, prog: str = "dreamcade export") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__)
    p.add_argument("run", help="a run folder (runs/<name>) or its model.safetensors")
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
    from pathlib import Path

    from model.world import export_world, is_world

    args = parse_args(argv, prog)
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        print(f"error: {out}: already exists; choose another --out or pass --overwrite", file=sys.stderr)
        return 2
    if out.exists() and not is_world(out):
        print(f"error: {out}: exists and is not a world folder; refusing to replace it", file=sys.stderr)
        return 2
    command = " ".join(["dreamcade", "export", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    try:
        info = export_world(args.run, out, args.data, args.report, args.episodes, args.frames, command)
    except (CheckpointError, StoreError, SpecError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    r = info["reference"]
    print(f"wrote {out}: {info['name']} at step {info['step']}, {r['episodes']} start episodes "
          f"({r['frames']} frames); play it with `dreamcade play --checkpoint {out}`")
    return 0
