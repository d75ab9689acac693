"""Sampling loops over a denoiser D(x, sigma): Euler or Heun on a Karras schedule, with
optional stochastic churn (Karras et al. 2022, Alg. 2)."""

from __future__ import annotations

import math
from typing import Callable

import torch

from model.edm import euler_step

Denoise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@torch.no_grad()
def sample(denoise: Denoise, noise: torch.Tensor, sigmas: torch.Tensor, method: str = "euler",
           churn: float = 0.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """Integrate from x = noise * sigmas[0] down to sigma 0; `noise` is N(0, I) of the output's
    shape. Returns float32 x in data space."""
    if method not in ("euler", "heun"):
        raise ValueError(f"method must be 'euler' or 'heun', got {method!r}")
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
        x_next = euler_step(x, denoised, s_hat, s_next)
        if method == "heun" and s_next > 0:
            denoised_next = denoise(x_next, x.new_full((x.shape[0],), s_next))
            slope = ((x - denoised) / s_hat + (x_next - denoised_next) / s_next) / 2
            x_next = x + (s_next - s_hat) * slope
        x = x_next
    return x


def quantize(x: torch.Tensor) -> torch.Tensor:
    """Round frames in [-1, 1] to the 256 levels of 8-bit images (what gets fed back)."""
    return to_uint8(x).float().div(127.5).sub(1.0)


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    return x.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8)

