"""The one training loop, of `dreamcade train` and `dreamcade distill` alike: one process or
several through accelerate, with EMA, checkpoints every train.save_every steps, resume, validation
figures, samples, and the run folder's model/ (at every checkpoint) and world/ at the end. What it
trains is a Task: the model whose weights move, its loss, and what the run adds when it ends
(denoising() for training; dreamcade.training.distill for a student). Its parts (the data, the
loss module, the optimizer and its schedule, the run folder, the log): dreamcade.training.parts."""

from __future__ import annotations

import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm import tqdm

from dreamcade.dataset import WindowDataset, make_loader
from dreamcade.dataset.batch import Batch
from dreamcade.files.checkpoint import load_training_state, rng_state, save_model
from dreamcade.files.config_file import to_dict
from dreamcade.model.config import Config, ConfigError
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.device import configure, resolve_device
from dreamcade.model.ema import make_ema, update_ema
from dreamcade.training.parts import (Logger, LossModule, Rate, due, lr_at, make_optimizer, save_run, set_lr,
                                      write_world)
from dreamcade.training.samples import evaluate, save_samples


@dataclass
class Task:
    """What one run of the loop trains and saves: `model` (on the device), whose parameters the
    optimizer moves and whose EMA the run saves; `loss` of a batch; `speed`, how the model's
    network runs (train.precision, train.compile), for its loss and the run's figures; `name`, the prefix of its
    figures in stats.jsonl; `finish(saved model, step, log)`, run once at the end by the first
    process (`log(step, figures)` writes to stats.jsonl), returns more metadata (strings) for the
    model folder; `model_step`, the step the model folder
    records when it is not the loop's (a student records its teacher's); `figures`: the loop's
    validation figures and samples (a task that measures itself in `finish` turns them off);
    `world`: whether the run's world/ is written at the end (a two-stage run writes it after its
    second stage)."""

    model: torch.nn.Module
    loss: Callable[[Batch], torch.Tensor]
    speed: Speed = EAGER
    name: str = "train"
    finish: Callable[[Denoiser, int, Callable[[int, dict], None]], dict[str, str]] | None = None
    model_step: int | None = None
    figures: bool = True
    world: bool = True


def denoising(cfg: Config, train_ds: WindowDataset, device: torch.device) -> Task:
    """Training a world model: a new denoiser for the data's frames, its own EDM loss."""
    t = cfg.train
    model, speed = configure(Denoiser.build(cfg.model, cfg.diffusion, train_ds.spec, cfg.data.context,
                                            train_ds.frame_shape[:2]), device, t.precision, t.channels_last, t.compile)
    return Task(model, lambda batch: model.loss(batch, speed=speed), speed)


def train(cfg: Config, train_ds: WindowDataset, val_ds: WindowDataset | None, resume_from: Path | None,
          progress: bool = True, task: Callable[[Config, WindowDataset, torch.device], Task] = denoising) -> int:
    """Train `task` on `train_ds` to cfg.train.steps (from `resume_from` when given); 0, or 1
    when the loss stops being finite. Every process of an accelerate launch runs this."""
    t = cfg.train
    accelerator, device, rank, main_proc, world = start_process(cfg)
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if main_proc:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    work = task(cfg, train_ds, device)
    denoiser = work.model
    ema, optimizer, step = make_ema(denoiser), make_optimizer(denoiser, cfg), 0
    if resume_from is not None:
        step = resume(resume_from, denoiser, ema, optimizer, rank, world, main_proc)
    loss_module, optimizer = accelerator.prepare(LossModule(denoiser, work.loss), optimizer)
    per_epoch = len(train_ds) // (t.batch_size * world)  # batches of each process
    if per_epoch == 0:
        raise ConfigError(f"{len(train_ds)} training windows, fewer than train.batch_size={t.batch_size} x "
                          f"{world} processes")
    if main_proc:
        print(f"{cfg.name}: {sum(p.numel() for p in denoiser.parameters()) / 1e6:.2f} M parameters, "
              f"{len(train_ds)} training windows ({train_ds.mode}), {len(val_ds) if val_ds else 0} validation, "
              f"on {device}, {world} process{'es' if world > 1 else ''}", file=sys.stderr)
    logger = Logger(cfg, run_dir, main_proc)
    windows_log = open_windows_log(run_dir, rank) if t.log_windows else None
    bar = tqdm(total=t.steps, initial=step, unit="step", disable=not (progress and main_proc), dynamic_ncols=True)
    rate, grad_norm = Rate(step), None
    epoch, skip = divmod(step * t.grad_accum, per_epoch)
    while step < t.steps:
        loader = make_loader(train_ds, t.batch_size, seed=t.seed, epoch=epoch, skip_batches=skip,
                             num_workers=cfg.data.num_workers, weighting=cfg.data.weighting, rank=rank, world=world)
        for batch, windows in zip(loader, loader.batch_sampler):
            if windows_log is not None:
                windows_log.write(json.dumps({"step": step + 1, "windows": windows}) + "\n")
            with accelerator.accumulate(loss_module):
                loss = loss_module(batch.to(device, non_blocking=True))
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.optim.grad_clip > 0:
                    grad_norm = accelerator.clip_grad_norm_(loss_module.parameters(), cfg.optim.grad_clip)
                set_lr(optimizer, lr_at(step, cfg))
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if not accelerator.sync_gradients:
                continue
            step += 1
            update_ema(ema, denoiser, cfg.optim.ema_decay, step)
            if not math.isfinite(loss.item()):
                print(f"error: the loss is {loss.item()} at step {step}; lower optim.lr", file=sys.stderr)
                return 1
            if due(step, t.log_every, t.steps):
                log_step(step, loss, grad_norm, rate(step), cfg, world, work.name, logger, bar)
            if main_proc and work.figures:
                figures(step, ema, train_ds, val_ds, cfg, device, eager_speed(work.speed), logger)
            if due(step, t.save_every, t.steps):
                rngs = every_rng_state(world)  # every process takes part
                if main_proc:
                    save_run(run_dir, step, denoiser, ema, optimizer, cfg, train_ds.spec, rngs, work.model_step)
            bar.update(1)
            if step >= t.steps:
                break
        epoch, skip = epoch + 1, 0
    bar.close()
    extra = work.finish(ema, step, logger.log) if main_proc and work.finish is not None else None
    logger.close()
    if windows_log is not None:
        windows_log.close()
    accelerator.wait_for_everyone()
    accelerator.end_training()  # other processes leave here; the first writes the world
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()  # all together: left to the exit, a process can wait on one gone
    if main_proc:
        if extra is not None:  # the model folder again, with what the task adds
            save_model(run_dir, ema, cfg, step if work.model_step is None else work.model_step, extra)
        print(f"done: {run_dir / 'model'} (step {step})", file=sys.stderr)
        if work.world:
            write_world(run_dir)
    return 0


def start_process(cfg: Config):
    """This process's part: torch threads, the accelerator on the configured device, and the
    seeds (the noise differs per process; the data order, train.seed, does not). Returns
    (accelerator, device, rank, whether it is the first process, processes)."""
    from accelerate import Accelerator

    t = cfg.train
    if t.threads > 0:
        torch.set_num_threads(t.threads)
    device = resolve_device(t.device)
    accelerator = Accelerator(cpu=device.type == "cpu", gradient_accumulation_steps=t.grad_accum)
    rank = accelerator.process_index
    torch.manual_seed(t.seed + rank)
    np.random.seed(t.seed + rank)
    random.seed(t.seed + rank)
    return accelerator, accelerator.device, rank, accelerator.is_main_process, accelerator.num_processes


def resume(path: Path, model: Denoiser, ema: Denoiser, optimizer: torch.optim.Optimizer, rank: int, world: int,
           main_proc: bool) -> int:
    """Load a checkpoint into the model, EMA, optimizer and this process's RNG; its step."""
    state = load_training_state(path, model, ema, optimizer, rank)
    if main_proc:
        print(f"resuming from {path} at step {state['step']}", file=sys.stderr)
        if state.get("processes", 1) != world:
            print(f"note: the checkpoint was written by {state.get('processes', 1)} process(es) and this run has "
                  f"{world}: it goes on, but not as the uninterrupted run would have (another data order "
                  "and noise from here)", file=sys.stderr)
    return state["step"]


def log_step(step: int, loss: torch.Tensor, grad_norm, steps_s: float, cfg: Config, world: int, name: str,
             logger: Logger, bar) -> None:
    """The step's figures in stats.jsonl (prefixed with the task's name) and on the progress bar."""
    t = cfg.train
    samples_s = steps_s * t.batch_size * t.grad_accum * world
    stats = {"loss": loss.item(), "lr": lr_at(step, cfg), "grad_norm": None if grad_norm is None else float(grad_norm),
             "steps_per_s": steps_s, "samples_per_s": samples_s}
    logger.log(step, {f"{name}/{k}": v for k, v in stats.items()})
    bar.set_postfix(loss=f"{stats['loss']:.4f}", steps_s=f"{steps_s:.2f}", samples_s=f"{samples_s:.0f}")


def figures(step: int, ema: Denoiser, train_ds: WindowDataset, val_ds: WindowDataset | None, cfg: Config,
            device: torch.device, speed: Speed, logger: Logger) -> None:
    """What the first process reports when it is due: validation figures, samples."""
    t = cfg.train
    if val_ds is not None and due(step, t.eval_every, t.steps):
        logger.log(step, evaluate(ema, val_ds, cfg, device, speed))
    if t.sample_every and due(step, t.sample_every, t.steps):
        files = save_samples(ema, val_ds or train_ds, cfg, device, cfg.run_dir / "samples", step, speed)
        logger.media(step, files, train_ds.fps)


def eager_speed(speed: Speed) -> Speed:
    """The speed for the EMA's figures: the training's autocast, without its compiled network
    (which is the trained model's, not the EMA's)."""
    return Speed(speed.autocast)


def every_rng_state(world: int) -> list[tuple[dict, dict]]:
    """The RNG state of every process, in rank order (each resumes with its own)."""
    mine = rng_state()
    if world == 1:
        return [mine]
    out = [None] * world
    torch.distributed.all_gather_object(out, mine)
    return out


def open_windows_log(run_dir: Path, rank: int):
    (run_dir / "windows").mkdir(parents=True, exist_ok=True)
    return open(run_dir / "windows" / f"rank{rank}.jsonl", "a")
