"""The second stage of a two-stage run (upsampler.scale > 1): after the dynamics model has
trained on the data shrunk `scale` times, the upsampler (model/upsampler.py) trains through the
same loop on random crops of the full-size frames, into <run>/upsampler/, a run folder of its
own (config.yaml, stats.jsonl, checkpoints/, model/), resumable like the first. At its end it
measures itself on the held-out frames against the bicubic widening of the same low frames, and
the run's world/ is written with both stages."""

from __future__ import annotations

import copy

import numpy as np
import torch

from dreamcade.dataset import WindowDataset
from dreamcade.dataset.pixels import downscale, to_model, to_uint8
from dreamcade.eval.health import sharpness
from dreamcade.eval.metrics import mse, psnr_from_mse
from dreamcade.model.config import Config
from dreamcade.model.denoiser import EAGER, Speed
from dreamcade.model.device import configure
from dreamcade.model.sampler import schedule
from dreamcade.model.upsampler import STAGE, Upsampler, sampler_of
from dreamcade.training.loop import Task


def stage_config(cfg: Config) -> Config:
    """The upsampler's run: <run>/upsampler, upsampler.steps and .batch_size as the loop's, no
    periodic figures (it measures itself at the end)."""
    out = copy.deepcopy(cfg)
    out.out_dir, out.name = str(cfg.run_dir), STAGE
    out.train.steps, out.train.batch_size = cfg.upsampler.steps, cfg.upsampler.batch_size
    out.train.eval_every, out.train.sample_every = 0, 0
    return out


def build_upsampler(cfg: Config, frame_size: tuple[int, int]) -> Upsampler:
    """A new upsampler for full-size frames of `frame_size` (height, width) from the config."""
    u = cfg.upsampler
    return Upsampler(scale=u.scale, frame_size=[int(frame_size[0]), int(frame_size[1])], channels=list(u.channels),
                     blocks=u.blocks, cond_dim=u.cond_dim, groups=u.groups, sigma_data=u.sigma_data, p_mean=u.p_mean,
                     p_std=u.p_std, sigma_min=cfg.diffusion.sigma_min, sigma_max=cfg.diffusion.sigma_max,
                     cond_noise_max=u.cond_noise_max)


def upsampling(val_ds: WindowDataset | None):
    """The loop's Task maker for the second stage (the windows' last frames are its examples)."""
    def make(cfg: Config, train_ds: WindowDataset, device: torch.device) -> Task:
        t, crop = cfg.train, cfg.upsampler.crop
        model, speed = configure(build_upsampler(cfg, train_ds.frame_shape[:2]), device, t.precision,
                                 t.channels_last, t.compile)

        def finish(ema: Upsampler, step: int, log) -> dict[str, str]:
            if val_ds is None:
                return {}
            figures = measure(ema, val_ds, cfg, device, Speed(speed.autocast))
            log(step, {f"{STAGE}/{k}": v for k, v in figures.items()})
            return {}

        u = cfg.upsampler
        moves = u.motion_weight > 0 or u.motion_crops > 0
        loss = lambda batch: model.loss(batch.frames[:, -1], crop, speed=speed,
                                        prev=batch.frames[:, -2] if moves else None,
                                        motion_weight=u.motion_weight, motion_crops=u.motion_crops)
        return Task(model, loss, speed, name=STAGE,
                    finish=finish, figures=False, world=False)
    return make


@torch.no_grad()
def measure(model: Upsampler, ds: WindowDataset, cfg: Config, device: torch.device, speed: Speed = EAGER,
            frames: int = 256) -> dict:
    """On up to `frames` held-out frames (spread over the split): PSNR of the upsampled low frames
    and of their bicubic widening against the real frames, and the sharpness of each over the
    real frames' (eval.health.sharpness)."""
    n = min(frames, len(ds))
    batch = ds.__getitems__(np.linspace(0, len(ds) - 1, n).astype(int))
    real = batch.frames[:, -1]  # uint8 [N, 3, H, W]
    g = torch.Generator(device).manual_seed(cfg.train.seed)
    sigmas = schedule(sampler_of(cfg), device)
    made, wide = [], []
    for a in range(0, n, 32):
        low = to_model(downscale(real[a:a + 32], model.scale)).to(device)
        made.append(to_uint8(model.upsample(low, sigmas, cfg.upsampler.method, 0.0, g, speed)).cpu())
        wide.append(to_uint8(model.widen(low)).cpu())
    made, wide = torch.cat(made), torch.cat(wide)
    sharp = lambda x: float(sharpness(x.permute(0, 2, 3, 1).numpy()).mean())
    real_sharp = max(sharp(real), 1e-12)
    return {"psnr": float(psnr_from_mse(mse(made, real).mean())), "psnr_bicubic": float(psnr_from_mse(mse(wide, real).mean())),
            "sharpness_ratio": sharp(made) / real_sharp, "sharpness_ratio_bicubic": sharp(wide) / real_sharp}
