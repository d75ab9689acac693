"""Image quality metrics on uint8 or [-1, 1] frames, batched: [B, 3, H, W] -> [B]."""

from __future__ import annotations

import torch

from dreamcade.dataset.pixels import to_unit

PSNR_CAP = 100.0  # dB reported for identical images


def mse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Mean squared error per image in [0, 1] units (a one-level error everywhere is 1/255^2)."""
    return ((to_unit(a) - to_unit(b)) ** 2).flatten(1).mean(1)


def psnr_from_mse(err: torch.Tensor, cap: float = PSNR_CAP) -> torch.Tensor:
    """10 log10(1 / mse) in dB, capped (an error of 0 gives `cap`)."""
    err = torch.as_tensor(err, dtype=torch.float64)
    return (10 * torch.log10(1.0 / err.clamp_min(1e-30))).clamp(max=cap)


def psnr(a: torch.Tensor, b: torch.Tensor, cap: float = PSNR_CAP) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB per image, with a peak of 1 in [0, 1] units; capped at
    `cap` (identical images). Averages of capped values overstate near-perfect sets: the pooled
    figure, psnr_from_mse(mean of mse), does not."""
    return psnr_from_mse(mse(a, b), cap).float()


def _gaussian(size: int = 11, sigma: float = 1.5) -> torch.Tensor:
    x = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    return g / g.sum()


def _band(n: int, g: torch.Tensor) -> torch.Tensor:
    """[n - k + 1, n]: row i holds the kernel g (length k) at columns i .. i + k - 1, so M @ v is
    v filtered by g over its valid positions (a separable blur as two matrix products: far faster
    in float64 on the CPU than a grouped convolution, the same sums)."""
    k = len(g)
    rows = torch.arange(n - k + 1, device=g.device)[:, None]
    m = torch.zeros(n - k + 1, n, dtype=g.dtype, device=g.device)
    return m.scatter_(1, rows + torch.arange(k, device=g.device), g.expand(n - k + 1, k).contiguous())


def ssim(a: torch.Tensor, b: torch.Tensor, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Structural similarity per image (Wang et al. 2004): Gaussian window, K1 0.01, K2 0.03,
    mean over channels and valid pixels. Computed in float64: the variances are differences of
    means, and float32 leaves errors of about 1e-4 in the result on flat images."""
    x, y = to_unit(a).double(), to_unit(b).double()
    window = min(window, x.shape[-1], x.shape[-2])
    g = _gaussian(window, sigma).to(x.device, torch.float64)
    rows, cols = _band(x.shape[-2], g), _band(x.shape[-1], g).T
    blur = lambda t: rows @ t @ cols  # the 2-D Gaussian window, separable
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx**2, blur(y * y) - my**2, blur(x * y) - mx * my
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return s.flatten(1).mean(1).float()
