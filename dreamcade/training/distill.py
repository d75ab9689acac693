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
(docs/distill.md has the table).

The result is a run folder like train.py's: model/ (the student, with its sampler
steps in its config and the distillation in its metadata), config.yaml, distill.json,
stats.jsonl and world/; play, eval, bench and export load it like any other run.
"""

from __future__ import annotations

import copy
import json
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import yaml
from tqdm import tqdm

from dreamcade.dataset import make_loader
from dreamcade.dataset.batch import Batch
from dreamcade.files.checkpoint import check_spec, has_model, load_model, save_model
from dreamcade.model.config import Config, ConfigError
from dreamcade.eval.metrics import mse, psnr_from_mse
from dreamcade.files.config_file import to_dict
from dreamcade.model.denoiser import Denoiser
from dreamcade.model.device import configure, resolve_device
from dreamcade.model.runtime import Runtime
from dreamcade.model.sampler import next_frame, sample, schedule
from dreamcade.training.settings import DistillSettings
from dreamcade.training.parts import Logger, build_data, make_optimizer, run_output, set_lr, write_world


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
    if teacher.diffusion.motion_weight > 0:
        err = err * teacher.motion_weights(frames[:, L - 1], frames[:, L])
    return err.mean()


@torch.no_grad()
def held_out_psnr(ds, predict, device: torch.device, windows: int = 256) -> float:
    """PSNR (dB, pooled) of predict(past frames, actions, mask) against the real next frames, on
    up to `windows` evenly spread windows of `ds`; frames in [-1, 1]."""
    idx = torch.linspace(0, len(ds) - 1, min(len(ds), windows)).long().tolist()
    errors = []
    for i in range(0, len(idx), 64):
        batch = ds.__getitems__(idx[i:i + 64]).to(device)
        frames = batch.frames_float()
        gen = predict(frames[:, :-1], batch.actions[:, :-1], batch.mask[:, :-1])
        errors.append(mse(gen, frames[:, -1]).cpu())
    return float(psnr_from_mse(torch.cat(errors).mean()))


def sampled(model: Denoiser, sampler, seed: int):
    """predict() for held_out_psnr: the model's next frame in its sampler's steps."""
    g = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    return lambda context, actions, mask: next_frame(model, context, actions, mask, sampler, g)


def distill(checkpoint: str | Path, settings: DistillSettings, name: str, out_dir: str = "runs",
            runtime: Runtime = Runtime(), progress: bool = True) -> Path:
    """Train and write the student's run folder; returns it."""
    runtime.apply_threads()
    dev = resolve_device(runtime.device)
    teacher, tcfg, meta = load_model(checkpoint)
    settings.check(tcfg.sampler.steps)
    cfg = student_config(tcfg, name, out_dir, settings.steps)
    with run_output(cfg):  # checked and locked: a second distillation of this name is refused
        run_dir = cfg.run_dir
        if has_model(run_dir):
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
        save_model(run_dir, student, cfg, int(meta.get("step", 0)),
                   extra={"distilled": json.dumps(record)})
        print(f"done: {run_dir / 'model'} ({record['minutes']} minutes)", file=sys.stderr)
        write_world(run_dir)
    return run_dir
