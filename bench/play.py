"""Play-loop speed on this machine: frames per second of play.py's loop (read input, step the
model, draw the scaled frame and the HUD, no fps cap) with SDL's dummy video driver, per preset
and sampler steps (in the preset's sampler method), and the share of the loop spent in the
model, and for a two-stage preset (screen-128, screen-256: model/upsampler.py) the ms of each
stage. Random-init weights (speed does not depend on training), a 6-action exclusive spec,
context frames from a small made-up store.
Goal on 2 CPU cores: 15 frames/s or more at the demo preset (32x32) and the screen-demo preset
(64x36) with the preset's own sampler steps, and at screen-128 (128x72) with 1 dynamics step
and 1 upsampler step (the stages distilled, `dreamcade distill --steps 1`).

`python -m bench.play [--frames 300] [--steps 1,3,6] [--upsampler-steps 1,3] [--device cpu|cuda] [--compile] [--threads 2]`
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("SDL_AUDIODRIVER", "dummy")

import torch  # noqa: E402

from bench.common import report  # noqa: E402
from dreamcade.dataset import Control, ControlSpec, StoreWriter  # noqa: E402
from dreamcade.files.checkpoint import save_model  # noqa: E402
from dreamcade.files.config_file import load_config  # noqa: E402
from dreamcade.model.denoiser import Denoiser  # noqa: E402
from dreamcade.model.upsampler import STAGE  # noqa: E402
from dreamcade.training.upsampling import build_upsampler  # noqa: E402

SIZES = {"demo": (32, 32), "screen-demo": (64, 36), "atari-64": (64, 64), "screen-64": (64, 64),
         "screen-128": (128, 72), "screen-256": (256, 144)}
"""Preset -> the (width, height) of the frames it shows (a two-stage preset's dynamics model
makes them upsampler.scale times smaller)."""
SPEC = ControlSpec(tuple(Control(m) for m in ("NOOP", "FIRE", "UP", "RIGHT", "LEFT", "DOWN")), exclusive=True)
GOAL_FPS = {"demo": 15.0, "screen-demo": 15.0}
GOAL_STEP_FPS = {"screen-128": (1, 1, 15.0)}
"""Goals of the distilled stages: (dynamics steps, upsampler steps, frames/s)."""


def make_checkpoint(preset: str, folder: Path, one_step: bool = False) -> tuple[Path, Path]:
    """A random-init model of `preset` and a 2-episode store of moving bars at its size (with
    `one_step`, every stage's sampler set to 1 step, as a distilled student's)."""
    cfg = load_config(f"configs/{preset}.yaml")
    if one_step:
        cfg.sampler.steps, cfg.upsampler.sampler_steps = 1, 1
    torch.manual_seed(0)
    run = folder / preset
    run.mkdir()
    w, h = SIZES[preset]
    k = cfg.upsampler.scale
    save_model(run, Denoiser.build(cfg.model, cfg.diffusion, SPEC, cfg.data.context, (h // k, w // k)), cfg, 0)
    if k > 1:
        save_model(run / STAGE, build_upsampler(cfg, (h, w)), cfg, 0)
    store = folder / f"{preset}.zarr"
    with StoreWriter(store, spec=SPEC, fps=15, frame_size=(w, h), source={"kind": "bench"}) as writer:
        for t in range(64):
            if t % 32 == 0:
                writer.begin_episode()
            f = np.zeros((h, w, 3), np.uint8)
            f[:, (t * 2) % w:(t * 2) % w + 4] = (200, 180, 40)
            writer.append(f, SPEC.one_hot(t % len(SPEC)), t / 15)
    return run, store


def measure(run: Path, store: Path, steps: int, frames: int, args: argparse.Namespace,
            upsampler_steps: int | None = None) -> dict:
    """Loop frames/s, ms per frame, model ms per frame and its share of the loop (and of a
    two-stage preset, each stage's ms, its upsampler in `upsampler_steps`: None, the preset's)."""
    argv = ["--checkpoint", str(run), "--data", str(store), "--fps", "0", "--steps", str(steps), "--no-real",
            "--seed", "0", "--device", args.device, "--scale", str(args.scale), "--save-dir", tempfile.gettempdir()]
    if upsampler_steps is not None:
        argv += ["--upsampler-steps", str(upsampler_steps)]
    if args.compile:
        argv.append("--compile")
    import dreamcade.play.__main__ as cli

    player = cli.build(cli.parse_args(argv))
    try:
        player.run(max(3, frames // 10))  # warm-up (and compilation)
        model0, n0 = player.stats["model_s"], player.frames_done
        stages0 = dict(player.env.stage_s)
        t0 = time.perf_counter()
        player.run(n0 + frames)
        loop = time.perf_counter() - t0
        model = player.stats["model_s"] - model0
        stage_ms = {k: (v - stages0[k]) / frames * 1000 for k, v in player.env.stage_s.items()}
        two = player.env.upsampling is not None
    finally:
        player.close()
    return {"fps": frames / loop, "ms_per_frame": loop / frames * 1000, "model_ms": model / frames * 1000,
            "model_share": model / loop, "dynamics_ms": stage_ms["dynamics"] if two else None,
            "upsampler_ms": stage_ms["upsampler"] if two else None}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", type=int, default=300, help="frames measured per case (after a warm-up)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--scale", type=int, default=8, help="window pixels per frame pixel")
    p.add_argument("--compile", action="store_true", help="torch.compile the network")
    p.add_argument("--steps", default="1,3,6", help="sampler steps measured, comma-separated (default: 1,3,6)")
    p.add_argument("--upsampler-steps", default="1,3", help="a two-stage preset's upsampler steps measured with "
                   "each of --steps, comma-separated (default: 1,3)")
    p.add_argument("--presets", nargs="+", default=["demo", "screen-demo", "screen-128", "atari-64"],
                   choices=list(SIZES))
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            run, store = make_checkpoint(preset, Path(tmp))
            cfg = load_config(f"configs/{preset}.yaml")
            sampler, up = cfg.sampler, cfg.upsampler
            stage2 = [int(x) for x in args.upsampler_steps.split(",")] if up.scale > 1 else [None]
            for steps in [int(x) for x in args.steps.split(",")]:
                for k in stage2:
                    r = measure(run, store, steps, args.frames, args, k)
                    goal = GOAL_FPS.get(preset) if steps == sampler.steps else None
                    if GOAL_STEP_FPS.get(preset, (None, None))[:2] == (steps, k):
                        goal = GOAL_STEP_FPS[preset][2]
                    rows.append({"preset": preset, "frame": "x".join(map(str, SIZES[preset])), "steps": steps,
                                 "method": sampler.method,
                                 "upsampler": f"x{up.scale}, {k} {up.method}" if up.scale > 1 else "", **r,
                                 "goal_fps": goal, "meets_goal": None if goal is None else r["fps"] >= goal})
    suffix = args.device + ("-compile" if args.compile else "")
    report(f"play-{suffix}", rows, ["preset", "frame", "steps", "method", "upsampler", "fps", "ms_per_frame",
                                    "model_ms", "dynamics_ms", "upsampler_ms", "model_share", "goal_fps", "meets_goal"])


if __name__ == "__main__":
    main()
