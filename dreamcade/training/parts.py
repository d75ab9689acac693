"""What the training loop (dreamcade.training.loop) is made of: the data, the loss module DDP
syncs through, the optimizer and its schedule, the run folder, the log."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from dreamcade.dataset import WindowDataset, open_store
from dreamcade.dataset.batch import Batch
from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.errors import UserError
from dreamcade.dataset.outputs import Output, is_url
from dreamcade.dataset.windows import AllDamagedError, NoEpisodesError
from dreamcade.files.checkpoint import has_model, latest_checkpoint, save_model, save_training_state
from dreamcade.model.config import Config, ConfigError
from dreamcade.files.config_file import to_dict
from dreamcade.model.denoiser import Denoiser


class LossModule(torch.nn.Module):
    """forward(batch) -> loss(batch) of the trained `model`, so DDP sees a forward call (it syncs
    gradients through it); only `model`'s parameters are the module's."""

    def __init__(self, model: Denoiser, loss: Callable[[Batch], torch.Tensor]) -> None:
        super().__init__()
        self.model, self.objective = model, loss

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.objective(batch)


def build_data(cfg: Config, scale: int | None = None) -> tuple[WindowDataset, WindowDataset | None]:
    """Training and validation windows, split as dataset.windows.split_data decides from
    data.stores, data.val_fraction and data.context (whole episodes, or the last frames of a single
    one, by time): config.yaml is the record of the split that eval, play and export read again.
    The frames come shrunk `scale` times (default upsampler.scale: the dynamics model of a
    two-stage world trains on them so; its upsampler, scale 1, on the stored size).
    Validation is None when nothing is held out (val_fraction 0, one episode too short to split)
    or data.skip_damaged leaves none; says what is held out, and notes what was skipped."""
    d = cfg.data
    if not d.stores:
        raise ConfigError("no training data: pass --data STORE... or set data.stores in the config")
    stores = [open_store(p) for p in d.stores]  # opened once: damage is looked for once per store
    kw = dict(context=d.context, val_fraction=d.val_fraction, mode=d.mode, skip_damaged=d.skip_damaged,
              scale=cfg.upsampler.scale if scale is None else scale)
    train = WindowDataset(stores, split="train", **kw)
    notes = list(train.skipped)
    try:
        val = WindowDataset(stores, split="val", **kw)
        notes += val.skipped
    except AllDamagedError as e:
        val = None
        notes.append(f"no validation: {e}")
    except NoEpisodesError as e:
        val = None
        notes.append(f"no validation: {e}")
    for line in notes:
        print(f"note: {line}", file=sys.stderr)
    if val is not None and int(os.environ.get("RANK", "0")) == 0:
        print(f"validation: {val.held_out()}", file=sys.stderr)
    return train, val


def check_resume(checkpoint: Path, data: WindowDataset) -> None:
    """The data of a resumed run must have the control spec it was trained with."""
    saved = json.loads((checkpoint / "state.json").read_text())
    data.spec.check_same(ControlSpec.from_dict(saved["control_spec"]), "the training data",
                         f"the checkpoint {checkpoint}")


RUN_FILES = {"config.yaml", "stats.jsonl", "checkpoints", "model", "model.safetensors", "samples", "world", "windows",
             "wandb", "distill.json", "upsampler"}
"""What a run folder holds; a folder with anything else is not a run, and train never writes into it."""


def run_output(cfg: Config) -> contextlib.AbstractContextManager:
    """The run folder as an output (dataset.outputs): checked, and locked by the first process
    for the whole training, so a second training of the same name is refused while this one runs.
    Other processes of a multi-process run (RANK > 0) hold nothing."""
    if is_url(cfg.out_dir):  # before run_dir, whose Path would fold `s3://` into a local `s3:/`
        raise ConfigError(f"out_dir {cfg.out_dir}: writing a run to a URL is not supported; train into a local "
                          "folder and copy the run there")
    if int(os.environ.get("RANK", "0")) != 0:
        return contextlib.nullcontext()
    return Output(cfg.run_dir, what="run folder", inputs=cfg.data.stores, option="out_dir/name",
                  in_place="always", replaces=is_run_folder)


def is_run_folder(path: Path) -> bool:
    """A folder that holds nothing but what a run writes (or nothing), counting what a killed run
    left of them: `.world.partial-PID`, `.world.lock`, `.model.tmp-PID`, `.model.old-PID`."""
    def made_by_a_run(name: str) -> bool:
        base = name.lstrip(".").split(".partial-")[0].split(".tmp-")[0].split(".old-")[0].removesuffix(".lock")
        return name in RUN_FILES or (name.startswith(".") and base in RUN_FILES)
    return path.is_dir() and all(made_by_a_run(p.name) for p in path.iterdir())


def prepare_run(cfg: Config, resume: bool, rename: str = "name=<new name>") -> Path | None:
    """Check the run folder before any work; returns the checkpoint to resume from."""
    run_dir = cfg.run_dir
    ckpt = latest_checkpoint(run_dir)
    if resume:
        if ckpt is None:
            raise ConfigError(f"{run_dir}: nothing to resume (no complete checkpoint); drop --resume to start")
        return ckpt
    if ckpt is not None or has_model(run_dir):
        raise ConfigError(f"{run_dir}: a run of this name exists; pass --resume to continue it, or "
                          f"{rename} to start another")
    return None


def due(step: int, every: int, last: int) -> bool:
    """Whether a periodic task runs at `step`: every `every` steps (0: never) and at the last."""
    return step == last or (every > 0 and step % every == 0)


def lr_at(step: int, cfg: Config) -> float:
    """Linear warm-up to optim.lr, then constant."""
    return cfg.optim.lr * min(1.0, (step + 1) / max(1, cfg.optim.warmup_steps))


def make_optimizer(model: torch.nn.Module, cfg: Config) -> torch.optim.Optimizer:
    """AdamW, weight decay on the weight matrices and kernels only."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    o = cfg.optim
    return torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=o.lr, betas=tuple(o.betas), eps=o.eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


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

    def media(self, step: int, files: list[Path], fps: float) -> None:
        """Sample grids (.png) and rollout videos (.mp4) to wandb, beside the scalars; the files
        themselves stay in the run's samples/ either way."""
        if self.wandb is None or not files:
            return
        import wandb

        media = {}
        for f in files:
            kind = "samples/grid" if f.suffix == ".png" else "samples/rollout"
            media[kind] = (wandb.Image(str(f), caption=f"step {step}: last context | generated | real")
                           if f.suffix == ".png" else
                           wandb.Video(str(f), caption=f"step {step}: real | generated", fps=int(round(fps)),
                                       format="mp4"))
        self.wandb.log(media, step=step)

    def close(self) -> None:
        if self.file:
            self.file.close()
        if self.wandb is not None:
            self.wandb.finish()


class Rate:
    """Steps per second between two log lines."""

    def __init__(self, step: int) -> None:
        self.t, self.step = time.perf_counter(), step

    def __call__(self, step: int) -> float:
        now = time.perf_counter()
        rate = (step - self.step) / max(now - self.t, 1e-9)
        self.t, self.step = now, step
        return rate


def save_run(run_dir: Path, step: int, denoiser: Denoiser, ema: Denoiser, optimizer: torch.optim.Optimizer,
             cfg: Config, spec: ControlSpec, rngs: list[tuple[dict, dict]] | None = None,
             model_step: int | None = None) -> None:
    """A full checkpoint (resumable; with every process's RNG state) and the run's model folder
    (<run>/model) of the EMA weights."""
    inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the optimizer
    save_training_state(run_dir, step, denoiser, ema, inner, cfg, {"control_spec": spec.to_dict()},
                        cfg.train.keep_checkpoints, rngs)
    save_model(run_dir, ema, cfg, step if model_step is None else model_step)


def write_world(run_dir: Path) -> None:
    """<run>/world: the world folder to share (dreamcade.files.world); a failure here loses no training."""
    from dreamcade.files.world import export_world

    try:
        export_world(run_dir, run_dir / "world", command=f"dreamcade export {run_dir} --out {run_dir / 'world'}",
                     overwrite=True)  # the run's own world, made again by a resumed run
    except (UserError, OSError) as e:
        print(f"note: no world folder written ({e}); write it with `dreamcade export {run_dir} --out WORLD`",
              file=sys.stderr)
        return
    print(f"world: {run_dir / 'world'}; play it with `dreamcade play --checkpoint {run_dir / 'world'}`",
          file=sys.stderr)
