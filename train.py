"""Train the world model: `python train.py --config configs/<preset>.yaml [key=value ...]`.

One GPU (or the CPU) as it is; several through `accelerate launch train.py ...`. Everything goes
to runs/<name>/: stats.jsonl, config.yaml, samples/, checkpoints/ (full state, resumable with
--resume) and model.safetensors (the EMA weights that play.py and eval load).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from tqdm import tqdm

from dataset import ControlSpec, StoreError, WindowDataset, make_loader, open_store
from dataset.windows import NoEpisodesError
from dataset.batch import Batch
from eval.metrics import psnr, ssim
from eval.video import grid, upscale, write_image, write_video
from model.checkpoint import (CheckpointError, export_model, latest_checkpoint, load_training_state,
                              save_training_state)
from model.config import Config, ConfigError, load_config, to_dict
from model.denoiser import Denoiser
from model.device import configure, resolve_device
from model.ema import make_ema, update_ema
from model.env import WorldModelEnv
from model.sampler import next_frame
from dataset.pixels import model_to_hwc


class LossModule(torch.nn.Module):
    """forward(batch) -> loss, so DDP sees a forward call (it syncs gradients through it)."""

    def __init__(self, denoiser: Denoiser) -> None:
        super().__init__()
        self.denoiser = denoiser

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.denoiser.loss(batch)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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


def build_data(cfg: Config) -> tuple[WindowDataset, WindowDataset | None]:
    d = cfg.data
    if not d.stores:
        raise ConfigError("no training data: pass --data STORE... or set data.stores in the config")
    stores = [open_store(p) for p in d.stores]  # opened once: damage is looked for once per store
    kw = dict(context=d.context, val_fraction=d.val_fraction, mode=d.mode, skip_damaged=d.skip_damaged)
    train = WindowDataset(stores, split="train", **kw)
    try:
        val = WindowDataset(stores, split="val", **kw)
    except NoEpisodesError:
        val = None  # a single episode: nothing to hold out
    for line in train.skipped + (val.skipped if val else []):
        print(f"note: {line}", file=sys.stderr)
    return train, val


def due(step: int, every: int, last: int) -> bool:
    """Whether a periodic task runs at `step`: every `every` steps (0: never) and at the last."""
    return step == last or (every > 0 and step % every == 0)


def lr_at(step: int, cfg: Config) -> float:
    """Linear warm-up to optim.lr, then constant."""
    return cfg.optim.lr * min(1.0, (step + 1) / max(1, cfg.optim.warmup_steps))


def make_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    o = cfg.optim
    return torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=o.lr, betas=tuple(o.betas), eps=o.eps)


@torch.no_grad()
def evaluate(model: Denoiser, ds: WindowDataset, cfg: Config, device: torch.device) -> dict:
    """Validation loss and one-step PSNR and SSIM (generated vs real next frame, and repeat-last)."""
    g = torch.Generator(device).manual_seed(cfg.train.seed)
    losses, p_model, p_last, s_model, s_last = [], [], [], [], []
    for batch in make_loader(ds, cfg.train.batch_size, seed=cfg.train.seed, drop_last=False):
        if len(losses) >= cfg.train.eval_batches:
            break
        batch = batch.to(device)
        losses.append(model.loss(batch, generator=g).item())
        L = cfg.data.context
        frames = batch.frames_float()
        nxt = next_frame(model, frames[:, :L], batch.actions[:, :L], batch.mask[:, :L], cfg.sampler, g)
        p_model.append(psnr(nxt, frames[:, L]))
        p_last.append(psnr(frames[:, L - 1], frames[:, L]))
        s_model.append(ssim(nxt, frames[:, L]))
        s_last.append(ssim(frames[:, L - 1], frames[:, L]))
    mean = lambda xs: torch.cat(xs).mean().item()
    return {"val/loss": float(np.mean(losses)), "val/psnr": mean(p_model), "val/psnr_repeat_last": mean(p_last),
            "val/ssim": mean(s_model), "val/ssim_repeat_last": mean(s_last)}


@torch.no_grad()
def save_samples(model: Denoiser, ds: WindowDataset, cfg: Config, device: torch.device, out: Path, step: int) -> None:
    """A grid (rows: last context frame, generated, real) and a rollout video (real | generated)."""
    out.mkdir(parents=True, exist_ok=True)
    L, n = cfg.data.context, min(8, len(ds))
    items = np.linspace(0, len(ds) - 1, n).astype(int)
    batch = ds.__getitems__(items).to(device)
    frames = batch.frames_float()
    g = torch.Generator(device).manual_seed(0)
    gen = next_frame(model, frames[:, :L], batch.actions[:, :L], batch.mask[:, :L], cfg.sampler, g)
    hwc = lambda x: model_to_hwc(x).numpy()
    rows = [upscale(hwc(frames[:, L - 1]), 4), upscale(hwc(gen), 4), upscale(hwc(frames[:, L]), 4)]
    write_image(out / f"grid_{step:08d}.png", grid(rows))
    # rollout from the start of the longest episode, with its recorded actions
    ep = int(np.argmax(ds.ep_len))
    T = int(min(cfg.train.rollout_frames, ds.ep_len[ep] - L))
    if T < 1:
        return
    idx = ds.ep_start[ep] + np.arange(L + T)
    real = torch.from_numpy(ds._gather(idx[None])[0]).permute(0, 2, 3, 1).numpy()  # [L+T, H, W, 3]
    acts = ds._actions[idx]
    env = WorldModelEnv(model, cfg.sampler, device, seed=0)
    env.reset(real[None, :L], acts[None, : L - 1])
    gen_frames = [env.step(acts[L - 1 + t][None])[0].numpy() for t in range(T)]
    video = np.concatenate([real[L:], np.stack(gen_frames)], axis=2)  # real | generated
    write_video(out / f"rollout_{step:08d}.mp4", upscale(video, 4), ds.fps)


class Logger:
    """Appends a flat dict per log step to stats.jsonl; mirrors to wandb when asked."""

    def __init__(self, cfg: Config, run_dir: Path, enabled: bool) -> None:
        self.enabled = enabled
        self.file = open(run_dir / "stats.jsonl", "a") if enabled else None
        self.wandb = None
        if enabled and cfg.log.wandb != "off":
            import wandb

            self.wandb = wandb.init(project=cfg.log.project, name=cfg.name, config=to_dict(cfg),
                                    mode=cfg.log.wandb, dir=str(run_dir), resume="allow")

    def log(self, step: int, stats: dict) -> None:
        if not self.enabled:
            return
        self.file.write(json.dumps({"step": step, "time": time.time(), **stats}) + "\n")
        self.file.flush()
        if self.wandb is not None:
            self.wandb.log(stats, step=step)

    def close(self) -> None:
        if self.file:
            self.file.close()
        if self.wandb is not None:
            self.wandb.finish()


def prepare_run(cfg: Config, args: argparse.Namespace) -> Path | None:
    """Check the run folder before any work; returns the checkpoint to resume from."""
    run_dir = cfg.run_dir
    ckpt = latest_checkpoint(run_dir)
    if args.resume:
        if ckpt is None:
            raise ConfigError(f"{run_dir}: nothing to resume (no complete checkpoint); drop --resume to start")
        return ckpt
    if ckpt is not None or (run_dir / "model.safetensors").exists():
        raise ConfigError(f"{run_dir}: a run of this name exists; pass --resume to continue it, or "
                          f"name=<new name> to start another")
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    overrides = list(args.overrides) + ([f"data.stores={json.dumps(args.data)}"] if args.data else [])
    try:
        cfg = load_config(args.config, overrides)
        if args.dry_run:
            print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
            return 0
        # absolute, so play and eval find the data from any folder
        cfg.data.stores = [str(Path(p).resolve()) for p in cfg.data.stores]
        resume_from = prepare_run(cfg, args)
        train_ds, val_ds = build_data(cfg)
        if resume_from is not None:
            saved = json.loads((resume_from / "state.json").read_text())
            train_ds.spec.check_same(ControlSpec.from_dict(saved["control_spec"]),
                                     "the training data", f"the checkpoint {resume_from}")
    except (ConfigError, StoreError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return train(cfg, train_ds, val_ds, resume_from, progress=not args.quiet)
    except StoreError as e:  # damage met while streaming; the last checkpoint is intact
        print(f"error: {e}", file=sys.stderr)
        return 2


def train(cfg: Config, train_ds: WindowDataset, val_ds: WindowDataset | None, resume_from: Path | None,
          progress: bool = True) -> int:
    from accelerate import Accelerator

    t = cfg.train
    if t.threads > 0:
        torch.set_num_threads(t.threads)
    device = resolve_device(t.device)
    accelerator = Accelerator(cpu=device.type == "cpu", gradient_accumulation_steps=t.grad_accum)
    device, rank, main_proc = accelerator.device, accelerator.process_index, accelerator.is_main_process
    seed = t.seed + rank
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)

    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    if main_proc:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    denoiser = configure(Denoiser(cfg.model, cfg.diffusion, train_ds.spec, cfg.data.context), device,
                         t.precision, t.channels_last)
    ema = make_ema(denoiser)
    optimizer = make_optimizer(denoiser, cfg)
    step = 0
    if resume_from is not None:
        step = load_training_state(resume_from, denoiser, ema, optimizer)["step"]
        if main_proc:
            print(f"resuming from {resume_from} at step {step}", file=sys.stderr)
    if t.compile:
        denoiser.compile_network()
    loss_module, optimizer = accelerator.prepare(LossModule(denoiser), optimizer)
    logger = Logger(cfg, run_dir, main_proc)
    n_params = sum(p.numel() for p in denoiser.parameters())
    if main_proc:
        print(f"{cfg.name}: {n_params / 1e6:.2f} M parameters, {len(train_ds)} training windows "
              f"({train_ds.mode}), {len(val_ds) if val_ds else 0} validation, on {device}", file=sys.stderr)

    def save() -> None:
        if main_proc:
            save_training_state(run_dir, step, denoiser, ema, optimizer.optimizer if hasattr(optimizer, "optimizer")
                                else optimizer, cfg, {"control_spec": train_ds.spec.to_dict()}, t.keep_checkpoints)
            export_model(run_dir / "model.safetensors", ema, cfg, step)

    per_epoch = len(train_ds) // t.batch_size
    if per_epoch == 0:
        print(f"error: {len(train_ds)} training windows, fewer than train.batch_size={t.batch_size}", file=sys.stderr)
        return 2
    epoch, skip = divmod(step * t.grad_accum, per_epoch)
    bar = tqdm(total=t.steps, initial=step, unit="step", disable=not (progress and main_proc), dynamic_ncols=True)
    t_log, step_log = time.perf_counter(), step
    while step < t.steps:
        loader = make_loader(train_ds, t.batch_size, seed=seed, epoch=epoch, skip_batches=skip,
                             num_workers=cfg.data.num_workers, weighting=cfg.data.weighting)
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            with accelerator.accumulate(loss_module):
                loss = loss_module(batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients and cfg.optim.grad_clip > 0:
                    grad_norm = accelerator.clip_grad_norm_(loss_module.parameters(), cfg.optim.grad_clip)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(step, cfg)
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
                dt = time.perf_counter() - t_log
                rate = (step - step_log) / dt
                stats = {"train/loss": loss.item(), "train/lr": lr_at(step, cfg),
                         "train/grad_norm": float(grad_norm) if cfg.optim.grad_clip > 0 else None,
                         "train/steps_per_s": rate,
                         "train/samples_per_s": rate * t.batch_size * t.grad_accum * accelerator.num_processes}
                t_log, step_log = time.perf_counter(), step
                logger.log(step, stats)
                bar.set_postfix(loss=f"{stats['train/loss']:.4f}", steps_s=f"{rate:.2f}",
                                samples_s=f"{stats['train/samples_per_s']:.0f}")
            if main_proc and val_ds is not None and due(step, t.eval_every, t.steps):
                logger.log(step, evaluate(ema, val_ds, cfg, device))
            if main_proc and t.sample_every and due(step, t.sample_every, t.steps):
                save_samples(ema, val_ds or train_ds, cfg, device, run_dir / "samples", step)
            if due(step, t.save_every, t.steps):
                save()
            bar.update(1)
            if step >= t.steps:
                break
        epoch, skip = epoch + 1, 0
    bar.close()
    logger.close()
    if main_proc:
        print(f"done: {run_dir / 'model.safetensors'} (step {step}); play it with "
              f"`python play.py --checkpoint {run_dir}`", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
