"""What train.py reports while it trains, through eval's own one-step and open-loop code:
validation figures, a sample grid and a short rollout video in the run folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dreamcade.dataset import WindowDataset, make_loader
from dreamcade.eval.metrics import psnr, ssim
from dreamcade.eval.rollout import RepeatLast, one_step, open_loop
from dreamcade.eval.video import grid, upscale, write_image, write_video
from dreamcade.model.config import Config
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.world_env import WorldModelEnv


@torch.no_grad()
def evaluate(model: Denoiser, ds: WindowDataset, cfg: Config, device: torch.device, speed: Speed = EAGER) -> dict:
    """Validation loss and one-step PSNR and SSIM (generated vs real next frame, and repeat-last)."""
    g = torch.Generator(device).manual_seed(cfg.train.seed)
    last = RepeatLast(model.spec, model.context)
    losses, out = [], {"psnr": [], "psnr_repeat_last": [], "ssim": [], "ssim_repeat_last": []}
    for batch in make_loader(ds, cfg.train.batch_size, seed=cfg.train.seed, drop_last=False):
        if len(losses) >= cfg.train.eval_batches:
            break
        batch = batch.to(device)
        losses.append(model.loss(batch, generator=g, speed=speed).item())
        real = batch.frames[:, -1].cpu()  # uint8 [B, 3, H, W]
        for name, predictor in (("", model), ("_repeat_last", last)):
            gen = one_step(predictor, batch, cfg.sampler, g, speed).permute(0, 3, 1, 2)
            out["psnr" + name].append(psnr(gen, real))
            out["ssim" + name].append(ssim(gen, real))
    return {"val/loss": float(np.mean(losses)), **{f"val/{k}": torch.cat(v).mean().item() for k, v in out.items()}}


@torch.no_grad()
def save_samples(model: Denoiser, ds: WindowDataset, cfg: Config, device: torch.device, out: Path,
                 step: int, speed: Speed = EAGER) -> list[Path]:
    """A grid (rows: last context frame, generated, real) and a rollout video (real | generated);
    returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    L, n = cfg.data.context, min(8, len(ds))
    batch = ds.__getitems__(np.linspace(0, len(ds) - 1, n).astype(int)).to(device)
    gen = one_step(model, batch, cfg.sampler, torch.Generator(device).manual_seed(0), speed).numpy()
    hwc = lambda x: x.permute(0, 2, 3, 1).cpu().numpy()
    rows = [upscale(hwc(batch.frames[:, L - 1]), 4), upscale(gen, 4), upscale(hwc(batch.frames[:, L]), 4)]
    files = [write_image(out / f"grid_{step:08d}.png", grid(rows))]
    # a rollout from the start of the longest episode, with its recorded actions
    ep = int(np.argmax(ds.ep_len))
    T = int(min(cfg.train.rollout_frames, ds.ep_len[ep] - L))
    if T < 1:
        return files
    real, acts = ds.episode_steps(ep, L + T)
    env = WorldModelEnv(model, cfg.sampler, device, seed=0, speed=speed)
    gen = open_loop(env, real[None, :L], acts[None, :L - 1], acts[None, L - 1:L - 1 + T])[0]
    files.append(write_video(out / f"rollout_{step:08d}.mp4", upscale(np.concatenate([real[L:], gen], axis=2), 4),
                             ds.fps))
    return files
