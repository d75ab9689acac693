"""`dreamcade JOB ...`: the one command. Each job is a module with main(argv, prog) (a clone also
runs `python train.py` and `python play.py`); this module only picks the job and names it in the
help, and imports nothing heavy, so `dreamcade --help` is instant."""

from __future__ import annotations

import importlib
import os
import sys

JOBS = [
    ("record", "dreamcade.record.__main__", "record gameplay: `screen` (a game on your desktop) or `env` (a gymnasium game)"),
    ("data", "dreamcade.dataset.__main__", "training stores and checks: `build` (resize, crop, resample), `info`"),
    ("train", "dreamcade.train", "train a world model on stores (a preset: tiny, demo, screen-demo, atari-64, screen-64)"),
    ("distill", "dreamcade.distill", "a student of a trained model that makes each frame in fewer sampler steps"),
    ("play", "dreamcade.play.__main__", "play a world in a window, from your keyboard, mouse or gamepad"),
    ("eval", "dreamcade.eval.__main__", "measure it: `drift` (long-session health, healthy horizon), `sweep`, `video`"),
    ("export", "dreamcade.export", "a self-contained world folder from a run, to share"),
    ("demo", "dreamcade.demo", "the whole loop on Breakout (or SuperTux from the screen): record, build, train, eval, export, play"),
]


def usage() -> str:
    width = max(len(name) for name, _, _ in JOBS)
    lines = ["usage: dreamcade JOB [options]   (dreamcade JOB --help for a job's options)", "",
             "Record your own gameplay, train an action-conditioned diffusion world model, play it,",
             "measure its drift. The jobs, in the order you meet them:", ""]
    lines += [f"  {name:<{width}}  {what}" for name, _, what in JOBS]
    return "\n".join(lines)


def entry() -> None:
    """The `dreamcade` program (and `python -m dreamcade`): main's status as the exit status. After
    Ctrl-C the command has already cleaned up and said so in one line; the process then leaves at
    once, before the libraries' exit handlers, whose I/O threads were cut short mid-read and would
    print after that line."""
    code = main()
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] == "--version":
        from dreamcade.dataset.store import software_version

        print(f"dreamcade {software_version()}")
        return 0
    job = {name: module for name, module, _ in JOBS}.get(argv[0])
    if job is None:
        print(f"dreamcade: no job {argv[0]!r}; the jobs are {', '.join(n for n, _, _ in JOBS)} "
              "(dreamcade --help)", file=sys.stderr)
        return 2
    return importlib.import_module(job).main(argv[1:], prog=f"dreamcade {argv[0]}")
