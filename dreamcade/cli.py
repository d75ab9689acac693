"""`dreamcade JOB ...`: each job is the same code and options as its own entry point
(`python -m record`, `python -m dataset`, `python train.py`, `python -m model.distill`,
`python play.py`, `python -m eval`),
which stay; this module only picks the job and names it in the help."""

from __future__ import annotations

import importlib
import sys

JOBS = [
    ("record", "record.__main__", "record gameplay: `screen` (a game on your desktop) or `env` (a gymnasium game)"),
    ("data", "dataset.__main__", "training stores and checks: `build` (resize, crop, resample), `info`"),
    ("train", "train", "train a world model on stores (a preset: tiny, demo, atari-64, screen-64)"),
    ("distill", "model.distill", "a student of a trained model that makes each frame in fewer sampler steps"),
    ("play", "play.cli", "play a world in a window, from your keyboard, mouse or gamepad"),
    ("eval", "eval.__main__", "measure it: `drift` (long-session health, healthy horizon), `sweep`, `video`"),
    ("export", "dreamcade.export", "a self-contained world folder from a run, to share"),
    ("demo", "demo", "the whole loop on Breakout: record, build, train, eval, export, play"),
]


def usage() -> str:
    width = max(len(name) for name, _, _ in JOBS)
    lines = ["usage: dreamcade JOB [options]   (dreamcade JOB --help for a job's options)", "",
             "Record your own gameplay, train an action-conditioned diffusion world model, play it,",
             "measure its drift. The jobs, in the order you meet them:", ""]
    lines += [f"  {name:<{width}}  {what}" for name, _, what in JOBS]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from dataset.store import software_version

        print(f"dreamcade {software_version()}")
        return 0
    job = {name: module for name, module, _ in JOBS}.get(argv[0])
    if job is None:
        print(f"dreamcade: no job {argv[0]!r}; the jobs are {', '.join(n for n, _, _ in JOBS)} "
              "(dreamcade --help)", file=sys.stderr)
        return 2
    return importlib.import_module(job).main(argv[1:], prog=f"dreamcade {argv[0]}")
