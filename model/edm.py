"""EDM diffusion math as pure tensor functions (Karras et al. 2022, "Elucidating the Design
Space of Diffusion-Based Generative Models"). No state; sigma is broadcastable to the data."""

from __future__ import annotations

import torch


def karras_sigmas(n: int, sigma_min: float, sigma_max: float, rho: float = 7.0) -> torch.Tensor:
    """n noise levels from sigma_max down to sigma_min, then a final 0 (Eq. 5); shape [n + 1]."""
    if n < 1:
        raise ValueError(f"need at least one step, got {n}")
    ramp = torch.linspace(0, 1, n, dtype=torch.float64)
    if n == 1:
        ramp = torch.zeros(1, dtype=torch.float64)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    sigmas = (hi + ramp * (lo - hi)) ** rho
    return torch.cat([sigmas, sigmas.new_zeros(1)]).float()


def c_skip(sigma: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """Skip scaling (Table 1): sigma_data^2 / (sigma^2 + sigma_data^2)."""
    return sigma_data**2 / (sigma**2 + sigma_data**2)


def c_out(sigma: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """Output scaling (Table 1): sigma * sigma_data / sqrt(sigma^2 + sigma_data^2)."""
    return sigma * sigma_data / (sigma**2 + sigma_data**2).sqrt()


def c_in(sigma: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """Input scaling (Table 1): 1 / sqrt(sigma^2 + sigma_data^2)."""
    return 1 / (sigma**2 + sigma_data**2).sqrt()


def c_noise(sigma: torch.Tensor) -> torch.Tensor:
    """Noise conditioning (Table 1): ln(sigma) / 4."""
    return sigma.log() / 4


def loss_weight(sigma: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """lambda(sigma) = (sigma^2 + sigma_data^2) / (sigma * sigma_data)^2 (Eq. 8 with Table 1)."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


def sample_sigmas(n: int, p_mean: float, p_std: float, sigma_min: float, sigma_max: float,
                  device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> torch.Tensor:
    """Training noise levels: ln(sigma) ~ N(p_mean, p_std^2) (Table 1), clipped; shape [n]."""
    z = torch.randn(n, device=device, generator=generator)
    return (z * p_std + p_mean).exp().clamp(sigma_min, sigma_max)


def edm_loss(denoised: torch.Tensor, clean: torch.Tensor, sigma: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """Weighted denoising loss lambda(sigma) * ||D(x; sigma) - y||^2, mean over everything (Eq. 2)."""
    return (loss_weight(sigma, sigma_data) * (denoised.float() - clean.float()) ** 2).mean()


def euler_step(x: torch.Tensor, denoised: torch.Tensor, sigma: float, sigma_next: float) -> torch.Tensor:
    """One Euler step of the probability-flow ODE dx/dsigma = (x - D(x)) / sigma (Alg. 1)."""
    d = (x - denoised) / sigma
    return x + (sigma_next - sigma) * d
