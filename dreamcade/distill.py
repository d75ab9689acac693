"""`dreamcade distill --checkpoint RUN --steps 1`: a student of a trained model that makes each
frame in fewer sampler steps (the method: dreamcade.training.distill). The options are
DistillSettings' fields and the shared runtime options; torch is imported when it starts."""

from __future__ import annotations

import argparse
import sys

from dreamcade.dataset.errors import boundary
from dreamcade.eval.settings import add_options
from dreamcade.model.runtime import Runtime
from dreamcade.training.settings import DistillSettings


def parse_args(argv=None, prog: str = "dreamcade distill") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="the teacher: a run folder (runs/<name>)")
    p.add_argument("--name", help="the student's run name (default: <teacher>-<steps>step)")
    p.add_argument("--out-dir", default=None, help="folder of the student's run (default: the teacher run's folder)")
    add_options(p, DistillSettings)
    Runtime.add_options(p, only=("device", "threads"))
    p.add_argument("--resume", action="store_true", help="continue the student's run from its latest checkpoint")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv=None, prog: str = "dreamcade distill") -> int:
    args = parse_args(argv, prog)
    from dreamcade.files.checkpoint import model_home

    run = model_home(args.checkpoint)
    name = args.name or f"{run.name}-{args.steps}step"
    out_dir = args.out_dir or str(run.parent)

    def work() -> int:
        from dreamcade.training.distill import distill

        distill(args.checkpoint, DistillSettings.from_args(args), name, out_dir, Runtime.from_args(args),
                progress=not args.quiet, resume=args.resume)
        return 0

    return boundary(work, "interrupted: the student's run keeps its last checkpoint; continue it with --resume")


if __name__ == "__main__":
    sys.exit(main())
