"""`dreamcade export RUN --out WORLD`: the world folder of a training run (dreamcade.files.world), which
play and eval load on a machine that has never seen the recordings. `dreamcade export RUN --web OUT`:
the world as a static web page that plays offline in a browser (dreamcade.web)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from dreamcade.dataset.errors import boundary, plural


def parse_args(argv=None, prog: str = "dreamcade export") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__)
    p.add_argument("run", help="a run folder (runs/<name>)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", help="the world folder to write")
    where.add_argument("--web", metavar="OUT", help="a web folder to write instead: a page that plays the world "
                       "offline in the browser (the run's 1-step student where one is beside it; docs/web.md)")
    p.add_argument("--webgpu", action="store_true", help="with --web: also bundle the WebGPU runtime (about 29 MB "
                   "more), used where the browser has WebGPU")
    p.add_argument("--starts", type=int, default=16, help="with --web: start contexts kept, spread over the episodes "
                   "(default: 16; at most 4 an episode)")
    p.add_argument("--data", nargs="+", metavar="STORE", help="stores to take start contexts from "
                   "(default: the run's training stores, held-out episodes first)")
    p.add_argument("--report", help="an `eval drift` report of the run (its --out): its figures go in the card")
    p.add_argument("--episodes", type=int, default=8, help="with --out: episodes of start contexts kept (default: 8)")
    p.add_argument("--frames", type=int, default=500, help="with --out: frames kept of each (default: 500; at most "
                   "24 MB of raw frames in all)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing world folder")
    args = p.parse_args(argv)
    if args.episodes < 1 or args.frames < 2:
        p.error("--episodes must be at least 1 and --frames at least 2")
    if args.starts < 1:
        p.error("--starts must be at least 1")
    if args.web is None and args.webgpu:
        p.error("--webgpu goes with --web")
    if args.web is not None and args.report:
        p.error("--report goes with --out (a world folder's card); a web folder has none")
    if args.web is not None and args.data and len(args.data) > 1:
        p.error("--data with --web: one store to take the start contexts from")
    return args


def main(argv=None, prog: str = "dreamcade export") -> int:
    args = parse_args(argv, prog)
    return boundary(lambda: run(args, argv), "interrupted: no world written (what was at --out is as it was)")


def run(args: argparse.Namespace, argv) -> int:
    from dreamcade.files.world import export_world

    command = " ".join(["dreamcade", "export", *map(shlex.quote, sys.argv[1:] if argv is None else argv)])
    if args.web is not None:
        return run_web(args, command)
    info = export_world(args.run, args.out, args.data, args.report, args.episodes, args.frames, command,
                        overwrite=args.overwrite)
    r = info["reference"]
    print(f"wrote {args.out}: {info['name']} at step {info['step']}, {plural(r['episodes'], 'start episode')} "
          f"({r['frames']} frames); play it with `dreamcade play --checkpoint {args.out}`")
    return 0


def run_web(args: argparse.Namespace, command: str) -> int:
    from dreamcade.web.folder import export_web

    info = export_web(args.run, args.web, data=args.data, webgpu=args.webgpu, starts=args.starts,
                      overwrite=args.overwrite, command=command)
    h, w = info["size"]
    steps = " + ".join(f"{s['steps']}" for s in info["stages"])
    if info["model"] != str(Path(args.run)):
        print(f"taking the 1-step student beside the run: {info['model']}")
    print(f"wrote {args.web}: {info['name']} at {w}x{h} ({'a 1-step student, ' if info['student'] else ''}"
          f"{steps} sampler steps a frame), {plural(info['starts']['count'], 'start')}, "
          f"{info['bytes'] / 1e6:.1f} MB; open it with `python -m http.server` in that folder (docs/web.md)")
    return 0
