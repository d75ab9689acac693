"""Distil a trained world model into a student that makes each frame in fewer sampler steps.

`dreamcade distill --checkpoint runs/demo --steps 1 [--name demo-1step] [--iterations N]`

The student starts as a copy of the teacher and is trained on the teacher's training windows
with the teacher's context-noise augmentation (a level drawn in [0, diffusion.context_noise_max]
for each window, told to teacher and student alike), so it keeps the conditioning that keeps
long sessions healthy. Its loss carries the teacher's motion weight (diffusion.motion_weight),
so the few pixels that move count as much as they did in the teacher's training.

The student's `steps`-step sample from noise z is trained to equal the teacher's sample
(sampler.steps, its schedule and solver) from the same z, past frames and actions: the
trajectory's end point is regressed directly (Luhman & Luhman 2021, "Knowledge Distillation in
Iterative Generative Models"), with the gradient through every step of the student.
Consistency distillation (Song et al. 2023) was measured against it on the demo and not kept
(the README's "Fewer sampler steps" has the table).

The result is a run folder like train.py's: model.safetensors (the student, with its sampler
steps in its config and the distillation in its metadata), config.yaml, distill.json,
stats.jsonl and world/; play, eval, bench and export load it like any other run.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import yaml
from tqdm import tqdm

from dreamcade.dataset import make_loader
from dreamcade.dataset.batch import Batch
from dreamcade.dataset.errors import boundary
from dreamcade.files.checkpoint import check_spec, export_model, load_model
from dreamcade.model.config import STEPS, Config, ConfigError
from dreamcade.files.config_file import to_dict
from dreamcade.model.denoiser import Denoiser
from dreamcade.model.device import configure, resolve_device
from dreamcade.model.sampler import next_frame, sample, schedule
from dreamcade.training.parts import Logger, build_data, make_optimizer, run_output, set_lr, write_world


@dataclass
class DistillSettings:
    steps: int = 1
    """Sampler steps of the student, at least 1 and fewer than the teacher's."""
    iterations: int = 0
    """Optimizer steps; 0: a seventh of the teacher's train.steps, under a third of its
    training time (an iteration costs about two training steps: the teacher's sampler
    forwards, then the student's forward and backward)."""
    lr: float = 2e-4
    """AdamW learning rate (after a 20-step warm-up)."""
    batch_size: int = 0
    """Windows per step; 0: the teacher's train.batch_size."""
    seed: int = 0
    """Seed of the data order and the noise."""

    def check(self, teacher_steps: int) -> None:
        if not STEPS[0] <= self.steps < teacher_steps:
            raise ConfigError(f"--steps {self.steps}: the student needs at least {STEPS[0]} sampler step and fewer "
                              f"than the teacher's {teacher_steps}")
        if self.iterations < 0 or self.batch_size < 0 or not self.lr > 0:
            raise ConfigError("--iterations and --batch-size must be 0 (the default) or more, and --lr positive")


def student_config(teacher: Config, name: str, out_dir: str, steps: int) -> Config:
    """The teacher's config with the run's name and folder and the student's sampler steps."""
    cfg = copy.deepcopy(teacher)
    cfg.name, cfg.out_dir, cfg.sampler.steps = name, out_dir, steps
    cfg.check()
    return cfg


def distill_loss(teacher: Denoiser, student: Denoiser, batch: Batch, teacher_sampler, student_sampler,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Mean squared difference (motion-weighted as the teacher was trained) between the
    student's sample and the teacher's from the same noise, past frames and actions; both in the
    residual space the sampler integrates in."""
    frames = batch.frames_float()
    L, dev = teacher.context, frames.device
    context, ctx_sigma = teacher.noisy_context(frames[:, :L], generator)
    actions, mask = batch.actions[:, :L], batch.mask[:, :L]
    noise = torch.randn(frames[:, L].shape, device=dev, generator=generator)
    with torch.no_grad():
        target = sample(lambda x, s: teacher(x, s, context, ctx_sigma, actions, mask), noise,
                        schedule(teacher_sampler, dev), teacher_sampler.method)
    out = sample(lambda x, s: student(x, s, context, ctx_sigma, actions, mask), noise,
                 schedule(student_sampler, dev), student_sampler.method)
    err = (out - target) ** 2
    if teacher.cfg.motion_weight > 0:
        err = err * teacher.motion_weights(frames[:, L - 1], frames[:, L])
    return err.mean()


@torch.no_grad()
def held_out_psnr(ds, predict, device: torch.device, windows: int = 256) -> float:
    """PSNR (dB, pooled) of predict(past frames, actions, mask) against the real next frames, on
    up to `windows` evenly spread windows of `ds`; frames in [-1, 1]."""
    idx = torch.linspace(0, len(ds) - 1, min(len(ds), windows)).long().tolist()
    se, n = 0.0, 0
    for i in range(0, len(idx), 64):
        batch = ds.__getitems__(idx[i:i + 64]).to(device)
        frames = batch.frames_float()
        gen = predict(frames[:, :-1], batch.actions[:, :-1], batch.mask[:, :-1])
        se += ((gen - frames[:, -1]) * 127.5).pow(2).sum().item()
        n += gen.numel()
    return 10 * math.log10(255**2 / max(se / n, 1e-10))


def sampled(model: Denoiser, sampler, seed: int):
    """predict() for held_out_psnr: the model's next frame in its sampler's steps."""
    g = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    return lambda context, actions, mask: next_frame(model, context, actions, mask, sampler, g)


def distill(checkpoint: str | Path, settings: DistillSettings, name: str, out_dir: str = "runs",
            device: str = "auto", threads: int = 0, progress: bool = True) -> Path:
    """Train and write the student's run folder; returns it."""
    if threads > 0:
        torch.set_num_threads(threads)
    dev = resolve_device(device)
    teacher, tcfg, meta = load_model(checkpoint)
    settings.check(tcfg.sampler.steps)
    cfg = student_config(tcfg, name, out_dir, settings.steps)
    with run_output(cfg):  # checked and locked: a second distillation of this name is refused
        run_dir = cfg.run_dir
        if (run_dir / "model.safetensors").exists():
            raise ConfigError(f"{run_dir}: a run of this name exists; pass --name <new name> or remove it")
        iterations = settings.iterations or max(1, tcfg.train.steps // 7)
        batch_size = settings.batch_size or tcfg.train.batch_size
        cfg.train.seed = settings.seed
        train_ds, val_ds = build_data(tcfg)
        check_spec(teacher.spec, train_ds.spec, checkpoint)
        teacher = configure(teacher, dev, tcfg.train.precision, tcfg.train.channels_last).eval().requires_grad_(False)
        student = copy.deepcopy(teacher).train().requires_grad_(True)
        cfg.optim.lr = settings.lr
        optimizer = make_optimizer(student, cfg)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "stats.jsonl").unlink(missing_ok=True)  # the log of a distillation killed before its model
        (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        record = {"teacher": str(checkpoint), "teacher_step": int(meta.get("step", 0)),
                  "teacher_steps": tcfg.sampler.steps, "method": "trajectory", **asdict(settings),
                  "iterations": iterations, "batch_size": batch_size}
        logger = Logger(cfg, run_dir, True)
        torch.manual_seed(settings.seed)
        g = torch.Generator(dev).manual_seed(settings.seed)
        print(f"{name}: distilling {checkpoint} ({tcfg.sampler.steps} steps) into {settings.steps} step(s), "
              f"{iterations} iterations of {batch_size} windows on {dev}", file=sys.stderr)
        bar = tqdm(total=iterations, unit="step", disable=not progress, dynamic_ncols=True)
        step, epoch, t0 = 0, 0, time.time()
        while step < iterations:
            for batch in make_loader(train_ds, batch_size, seed=settings.seed, epoch=epoch):
                loss = distill_loss(teacher, student, batch.to(dev), tcfg.sampler, cfg.sampler, g)
                loss.backward()
                if not math.isfinite(loss.item()):
                    raise ConfigError(f"the distillation loss is {loss.item()} at step {step}; lower --lr")
                grad_norm = torch.nn.utils.clip_grad_norm_(student.parameters(), cfg.optim.grad_clip or math.inf)
                set_lr(optimizer, settings.lr * min(1.0, (step + 1) / 20))
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                if step % 10 == 0 or step == iterations:
                    logger.log(step, {"distill/loss": loss.item(), "distill/grad_norm": float(grad_norm)})
                    bar.set_postfix(loss=f"{loss.item():.5f}")
                bar.update(1)
                if step >= iterations:
                    break
            epoch += 1
        bar.close()
        student.eval().requires_grad_(False)
        record["minutes"] = round((time.time() - t0) / 60, 2)
        if val_ds is not None:
            figures = {"val/psnr": held_out_psnr(val_ds, sampled(student, cfg.sampler, settings.seed), dev),
                       "val/psnr_teacher": held_out_psnr(val_ds, sampled(teacher, tcfg.sampler, settings.seed), dev),
                       "val/psnr_repeat_last": held_out_psnr(val_ds, lambda c, a, m: c[:, -1], dev)}
            logger.log(step, figures)
            record.update(val_psnr=figures["val/psnr"], val_psnr_teacher=figures["val/psnr_teacher"])
            print(f"one-step PSNR on {min(len(val_ds), 256)} held-out windows: student {figures['val/psnr']:.2f} dB, "
                  f"teacher {figures['val/psnr_teacher']:.2f} dB", file=sys.stderr)
        logger.close()
        (run_dir / "distill.json").write_text(json.dumps(record, indent=1) + "\n")
        export_model(run_dir / "model.safetensors", student, cfg, int(meta.get("step", 0)),
                     extra={"distilled": json.dumps(record)})
        print(f"done: {run_dir / 'model.safetensors'} ({record['minutes']} minutes)", file=sys.stderr)
        write_world(run_dir)
    return run_dir


def main(argv=None, prog: str = "dreamcade distill") -> int:
    p = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = DistillSettings()
    p.add_argument("--checkpoint", required=True, help="the teacher: a run folder (runs/<name>) or its model.safetensors")
    p.add_argument("--steps", type=int, default=d.steps, help="sampler steps of the student (default 1)")
    p.add_argument("--name", help="the student's run name (default: <teacher>-<steps>step)")
    p.add_argument("--out-dir", default=None, help="folder of the student's run (default: the teacher run's folder)")
    p.add_argument("--iterations", type=int, default=d.iterations,
                   help="optimizer steps (default: a seventh of the teacher's train.steps, under a third of its time)")
    p.add_argument("--lr", type=float, default=d.lr, help=f"learning rate (default {d.lr:g})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="windows per step (default: the teacher's)")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    args = p.parse_args(argv)
    teacher = Path(args.checkpoint)
    run = teacher.parent if teacher.suffix == ".safetensors" else teacher
    name = args.name or f"{run.resolve().name}-{args.steps}step"
    out_dir = args.out_dir or str(run.resolve().parent)
    settings = DistillSettings(args.steps, args.iterations, args.lr, args.batch_size, args.seed)
    return boundary(lambda: distill(args.checkpoint, settings, name, out_dir, args.device, args.threads,
                                    progress=not args.quiet) and 0,
                    "interrupted: no student written (a distillation has no checkpoints; run it again)")


if __name__ == "__main__":
    sys.exit(main())
