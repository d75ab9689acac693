"""Sampling: the loops over a denoiser D(x, sigma) (Euler or Heun on a Karras schedule, with
optional stochastic churn; Karras et al. 2022, Alg. 2), and the next frame of a world model,
which owns everything around them: the schedule, the noise, the context-noise level, the
residual base and the rounding to 8-bit levels. The sampler settings and their rules are
model/config.py's SamplerConfig.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from dreamcade.dataset.pixels import LEVEL, quantize
from dreamcade.model import edm
from dreamcade.model.config import METHODS, SamplerConfig, check_guided, context_noise_used
from dreamcade.model.denoiser import EAGER, Speed

Denoise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
__all__ = ["schedule", "sample", "next_frame", "conditioned"]


def schedule(sampler: SamplerConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """The noise levels a frame is sampled through: Karras' schedule of sampler.steps steps."""
    return edm.karras_sigmas(sampler.steps, sampler.sigma_min, sampler.sigma_max, sampler.rho).to(device)


# -- the loops -----------------------------------------------------------------------------------------

def sample(denoise: Denoise, noise: torch.Tensor, sigmas: torch.Tensor, method: str = "euler",
           churn: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Integrate from x = noise * sigmas[0] down to sigma 0; `noise` is N(0, I) of the output's
    shape. Returns float32 x in data space. Gradients flow through it when enabled (a
    distillation student is trained through its own steps); next_frame turns them off."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    n = len(sigmas) - 1
    x = noise.float() * sigmas[0]
    gamma = min(churn / n, math.sqrt(2) - 1) if churn > 0 else 0.0
    for i in range(n):
        s, s_next = float(sigmas[i]), float(sigmas[i + 1])
        s_hat = s * (1 + gamma)
        if gamma > 0:
            eps = torch.randn(x.shape, device=x.device, generator=generator)
            x = x + math.sqrt(s_hat**2 - s**2) * eps
        denoised = denoise(x, x.new_full((x.shape[0],), s_hat))
        x_next = edm.euler_step(x, denoised, s_hat, s_next)
        if method == "heun" and s_next > 0:
            denoised_next = denoise(x_next, x.new_full((x.shape[0],), s_next))
            slope = ((x - denoised) / s_hat + (x_next - denoised_next) / s_next) / 2
            x_next = x + (s_next - s_hat) * slope
        x = x_next
    return x


@torch.no_grad()
def next_frame(denoiser, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
               sampler: SamplerConfig, generator: torch.Generator | None = None, speed: Speed = EAGER) -> torch.Tensor:
    """The next frame after `context` [B, L, 3, H, W] (in [-1, 1]) under `actions` [B, L, A],
    from a Denoiser run at `speed`: sampled in sampler.steps steps and rounded to 8-bit levels;
    [B, 3, H, W]."""
    b, L, c, h, w = context.shape
    dev = context.device
    mask = torch.ones(b, L, dtype=torch.bool, device=dev) if mask is None else mask
    level = context_noise_used(sampler.context_noise, denoiser.diffusion.context_noise_max)
    sigmas = schedule(sampler, dev)
    noise = torch.randn((b, c, h, w), device=dev, generator=generator)
    last = context[:, -1]
    context, ctx_sigma = denoiser.noisy_context(context, generator, level)
    base = denoiser.base(context)  # as in training: the last frame as the network sees it
    s = sampler
    x = sample(conditioned(denoiser, context, ctx_sigma, actions, mask, s.guidance, speed, s.guidance_rescale), noise,
               sigmas, s.method, s.churn, generator)
    return hold(quantize((base + x).clamp(-1, 1)), last, sampler.hold_levels)


def conditioned(denoiser, context: torch.Tensor, ctx_sigma: torch.Tensor, actions: torch.Tensor,
                mask: torch.Tensor, guidance: float = 1.0, speed: Speed = EAGER, rescale: float = 0.0) -> Denoise:
    """D(x, sigma) of a Denoiser given the past frames and actions; with `guidance` above 1
    (sampler.guidance), D without the actions plus `guidance` times the change the actions make,
    both from one call on a batch of twice the size, and with `rescale` above 0
    (sampler.guidance_rescale) that share of it brought back to the spread of D with the actions.
    A model trained without diffusion.action_drop never learned the frame without the actions:
    ConfigError."""
    if guidance == 1:
        return lambda x, s: denoiser(x, s, context, ctx_sigma, actions, mask, speed)
    check_guided(guidance, denoiser.diffusion.action_drop)
    b = context.shape[0]
    two = lambda t: torch.cat([t, t])
    dropped = torch.arange(2 * b, device=context.device) >= b  # the second half without the actions
    given = [two(t) for t in (context, ctx_sigma, actions, mask)]

    def guided(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        both = denoiser(two(x), two(s), *given, speed, dropped)
        with_keys, without = both[:b], both[b:]
        out = without + guidance * (with_keys - without)
        return rescaled(out, with_keys, rescale) if rescale > 0 else out

    return guided


def rescaled(guided: torch.Tensor, with_keys: torch.Tensor, share: float) -> torch.Tensor:
    """`guided` [B, ...] with `share` of it scaled to each sample's standard deviation of
    `with_keys` (Lin et al. 2024, "Common diffusion noise schedules and sample steps are flawed",
    sec. 3.4): guidance's push along the keys' change kept, its growth of the frame's contrast
    taken back."""
    dims = tuple(range(1, guided.ndim))
    spread = with_keys.std(dim=dims, keepdim=True) / guided.std(dim=dims, keepdim=True).clamp_min(1e-8)
    return share * guided * spread + (1 - share) * guided


def hold(frame: torch.Tensor, last: torch.Tensor, levels: float) -> torch.Tensor:
    """`frame` with the pixels (each channel) within `levels` 8-bit levels of `last` set to
    `last`'s value: changes smaller than that are taken as sampling error, not as change."""
    if levels <= 0:
        return frame
    return torch.where((frame - last).abs() <= levels * LEVEL + 1e-6, last, frame)
