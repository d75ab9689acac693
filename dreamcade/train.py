"""Train the world model: `dreamcade train --config PRESET [key=value ...]` (a clone also runs
`python train.py ...`). One GPU (or the CPU) as it is; several through `accelerate launch
train.py ...` from a clone (docs/train.md). Everything goes
to runs/<name>/: stats.jsonl, config.yaml, samples/, checkpoints/ (full state, resumable with
--resume), model/ (the EMA weights that play and eval load) and, at the end,
world/ (the same model as a world folder to share: `dreamcade export`).

With upsampler.scale > 1 (a two-stage world, model/upsampler.py) the data is at the size the
world shows; the dynamics model trains on it shrunk that many times, then the upsampler trains
into runs/<name>/upsampler/ (a run folder of its own), and world/ holds both.
"""

from __future__ import annotations

import argparse
import json
import sys

from dreamcade.dataset.errors import boundary

# The loop and what it needs (torch, the data, the model) are imported when training starts, so
# --help and --dry-run are instant: dreamcade.training.loop.


def parse_args(argv=None, prog: str = "python train.py") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help="YAML preset (configs/tiny.yaml, demo, atari-64, screen-64)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="config overrides, e.g. train.steps=2000 model.channels=[32,64] name=pong")
    p.add_argument("--data", nargs="+", metavar="STORE", help="training stores (sets data.stores)")
    p.add_argument("--resume", action="store_true", help="continue runs/<name> from its latest checkpoint")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_intermixed_args(argv)  # options may come between the overrides
    # `--data a.zarr b.zarr train.steps=10`: KEY=VALUE words after --data are overrides
    if args.data:
        args.overrides += [d for d in args.data if "=" in d]
        args.data = [d for d in args.data if "=" not in d]
    return args


def main(argv=None, prog: str = "python train.py") -> int:
    args = parse_args(argv, prog)
    return boundary(lambda: run(args), "interrupted: the run keeps its last checkpoint; continue it with --resume")


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    import yaml

    from dreamcade.dataset.store import absolute
    from dreamcade.files.checkpoint import latest_checkpoint
    from dreamcade.files.config_file import load_config, to_dict
    from dreamcade.training.loop import denoising, train
    from dreamcade.training.parts import build_data, check_resume, prepare_run, run_output, write_world
    from dreamcade.training.upsampling import stage_config, upsampling

    overrides = list(args.overrides) + ([f"data.stores={json.dumps(args.data)}"] if args.data else [])
    cfg = load_config(args.config, overrides)
    if args.dry_run:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
        return 0
    cfg.data.stores = [absolute(p) for p in cfg.data.stores]  # play and eval find them anywhere
    with run_output(cfg):  # the first process holds the run folder until training ends
        resume_from = prepare_run(cfg, args.resume)
        train_ds, val_ds = build_data(cfg)
        if resume_from is not None:
            check_resume(resume_from, train_ds)
        if cfg.upsampler.scale == 1:
            return train(cfg, train_ds, val_ds, resume_from, progress=not args.quiet)
        # two stages; a resumed run whose dynamics model is done goes on to the upsampler
        first = lambda c, ds, dev: replace(denoising(c, ds, dev), world=False)
        rc = train(cfg, train_ds, val_ds, resume_from, progress=not args.quiet, task=first)
        if rc != 0:
            return rc
        up = stage_config(cfg)
        up_train, up_val = build_data(up, scale=1)
        resume_up = args.resume and latest_checkpoint(up.run_dir) is not None  # else it starts
        rc = train(up, up_train, up_val, prepare_run(up, resume_up), progress=not args.quiet, task=upsampling(up_val))
        if rc == 0:
            write_world(cfg.run_dir)
        return rc


if __name__ == "__main__":
    sys.exit(main())
