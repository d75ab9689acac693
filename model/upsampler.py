"""The second stage of a two-stage world: a diffusion upsampler that makes the full-size frame
from the dynamics model's small one (DIAMOND's CS:GO design). The dynamics model (denoiser.py)
generates every frame at low resolution from the past low-resolution frames and the actions;
this model draws the frame at `scale` times that size, given only that one low-resolution frame.
It keeps no past of its own, so whatever it gets wrong in one frame is not fed back: how long a
world holds stays the dynamics model's business.

What is diffused is the difference from the low frame widened bicubically (the base): a flat
area is a zero to predict, and the network spends itself on edges and texture. The network is
fully convolutional (no attention), so it is trained on random crops of the frames and run on
whole ones. The low frame gets Gaussian noise of a level drawn in [0, cond_noise_max] during
training (conditioning augmentation, Ho et al. 2021), told to the network, so that a generated
low frame, which is never exactly a downscaled real one, is still something it has seen. The
pixels that moved since the frame before count more in its loss, and part of its crops are placed
over them (upsampler.motion_weight, upsampler.motion_crops), so a small moving object, of which
the low frame holds a dim blob, is drawn and not averaged away.

Like the denoiser, it is a diffusers model: `Upsampler.from_pretrained(WORLD, subfolder="upsampler")`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from dreamcade.dataset.pixels import downscale, moved, quantize, to_model
from dreamcade.model import edm
from dreamcade.model.conditioning import context_level_feature
from dreamcade.model.config import Config, ConfigError, NetworkConfig, SamplerConfig
from dreamcade.model.denoiser import EAGER, Speed
from dreamcade.model.sampler import sample
from dreamcade.model.unet import FourierFeatures, UNet

STAGE = "upsampler"
"""The second stage's folder: in a run (a run folder of its own) and in a world (a model folder)."""


def sampler_of(cfg: Config) -> SamplerConfig:
    """The sampler settings an upsampler draws a frame with: its run's, with
    upsampler.sampler_steps and upsampler.method."""
    return replace(cfg.sampler, steps=cfg.upsampler.sampler_steps, method=cfg.upsampler.method)


def mlp(dim: int, scale: float) -> nn.Sequential:
    return nn.Sequential(FourierFeatures(dim, scale), nn.Linear(dim, dim), nn.SiLU(), nn.Linear(dim, dim))


class Upsampler(ModelMixin, ConfigMixin):
    """D(x; sigma, low) = c_skip x + c_out F(c_in x, widen(low)) around a UNet with 6 input
    channels (the noisy difference and the widened low frame), conditioned on the noise level
    and the low frame's noise level."""

    config_name = "config.json"

    @register_to_config
    def __init__(self, *, scale: int, frame_size: list[int], channels: list[int], blocks: int, cond_dim: int,
                 groups: int, sigma_data: float, p_mean: float, p_std: float, sigma_min: float, sigma_max: float,
                 cond_noise_max: float) -> None:
        super().__init__()
        if not isinstance(scale, int) or scale < 2:
            raise ConfigError(f"upsampler scale {scale!r}: a whole number, 2 or more")
        if not (isinstance(frame_size, (list, tuple)) and len(frame_size) == 2
                and all(isinstance(x, int) and x > 0 and x % scale == 0 for x in frame_size)):
            raise ConfigError(f"upsampler frame_size {frame_size!r}: [height, width], whole multiples of {scale}")
        net = NetworkConfig(channels=list(channels), blocks=blocks, attention_levels=[], cond_dim=cond_dim,
                            action_dim=1, groups=groups)
        net.check()
        if not (sigma_data > 0 and p_std > 0 and 0 < sigma_min < sigma_max and cond_noise_max >= 0):
            raise ConfigError("upsampler: needs sigma_data, p_std > 0, 0 < sigma_min < sigma_max, cond_noise_max >= 0")
        self.scale = scale
        self.frame_size = (int(frame_size[0]), int(frame_size[1]))
        """(height, width) of the frames it makes; the low frames are these over `scale`."""
        self.net = UNet(6, 3, net)
        self.noise = mlp(cond_dim, 16.0)
        self.level = mlp(cond_dim, 1.0)

    @classmethod
    def init_keys(cls) -> list[str]:
        """The names of the registered arguments (config.json's keys besides the private ones)."""
        return [name for name in inspect.signature(cls.__init__).parameters if name != "self"]

    @property
    def low_size(self) -> tuple[int, int]:
        return self.frame_size[0] // self.scale, self.frame_size[1] // self.scale

    def widen(self, low: torch.Tensor) -> torch.Tensor:
        """Low frames [B, 3, h, w] in [-1, 1] -> [B, 3, h*scale, w*scale], bicubic, clamped."""
        return F.interpolate(low, scale_factor=self.scale, mode="bicubic", align_corners=False).clamp(-1, 1)

    def condition(self, low: torch.Tensor, level: torch.Tensor,
                  generator: torch.Generator | None = None) -> torch.Tensor:
        """The base: the low frames plus Gaussian noise of `level` [B] (0: none), widened."""
        if (level > 0).any():
            noise = torch.randn(low.shape, device=low.device, generator=generator)
            low = low + level[:, None, None, None] * noise
        return self.widen(low)

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, base: torch.Tensor, level: torch.Tensor,
                speed: Speed = EAGER) -> torch.Tensor:
        """The denoised difference from `base` [B, 3, H, W] of noisy `x` at `sigma` [B]."""
        sd = self.config.sigma_data
        s = sigma[:, None, None, None]
        return edm.c_skip(s, sd) * x + edm.c_out(s, sd) * self.inner(x, sigma, base, level, speed)

    def inner(self, x, sigma, base, level, speed: Speed = EAGER) -> torch.Tensor:
        s = sigma[:, None, None, None]
        inp = torch.cat([edm.c_in(s, self.config.sigma_data) * x, base], dim=1)
        cond = self.noise(edm.c_noise(sigma)) + self.level(context_level_feature(level))
        return speed(self.net, inp, cond)

    def crops(self, frames: torch.Tensor, crop: int, generator: torch.Generator | None = None,
              prev: torch.Tensor | None = None, motion_crops: float = 0.0
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Training examples from full-size uint8 frames [B, 3, H, W]: a random crop x crop
        square of each (at a multiple of `scale`) of the base (its own downscale, plus noise of a
        level drawn in [0, cond_noise_max], widened) and of the target (the frame minus the base),
        the levels [B], and the square's moving pixels [B, 1, ch, cw] (those more than
        MOVE_LEVELS from `prev`, the frames before; all False without it). A share `motion_crops`
        of the squares is placed over a moving pixel drawn at random, where the frame has one."""
        b, _, h, w = frames.shape
        dev = frames.device
        low = to_model(downscale(frames, self.scale))
        level = torch.rand(b, device=dev, generator=generator) * self.config.cond_noise_max
        base = self.condition(low, level, generator)
        target = to_model(frames) - base
        moving = torch.zeros(b, 1, h, w, dtype=torch.bool, device=dev) if prev is None else \
            moved(prev, frames)
        ch, cw = min(crop, h), min(crop, w)
        ys = torch.randint(0, (h - ch) // self.scale + 1, (b,), generator=generator, device=dev) * self.scale
        xs = torch.randint(0, (w - cw) // self.scale + 1, (b,), generator=generator, device=dev) * self.scale
        if motion_crops > 0:
            flat = moving.flatten(1).float()
            has = flat.sum(1) > 0
            aim = has & (torch.rand(b, device=dev, generator=generator) < motion_crops)
            at = torch.multinomial(flat + ~has[:, None], 1, generator=generator)[:, 0]  # a moving pixel
            # the pixel at a random place in the square, the square's corner on the `scale` grid
            s = self.scale
            ay = (at // w - torch.randint(0, ch - s + 1, (b,), generator=generator, device=dev)).clamp(0, h - ch)
            ax = (at % w - torch.randint(0, cw - s + 1, (b,), generator=generator, device=dev)).clamp(0, w - cw)
            ys = torch.where(aim, ay // s * s, ys)
            xs = torch.where(aim, ax // s * s, xs)
        rows = ys[:, None] + torch.arange(ch, device=dev)  # [B, ch]
        cols = xs[:, None] + torch.arange(cw, device=dev)
        pick = lambda t: t[torch.arange(b, device=dev)[:, None, None, None], torch.arange(t.shape[1], device=dev)[None, :, None, None],
                           rows[:, None, :, None], cols[:, None, None, :]]
        return pick(base), pick(target), level, pick(moving)

    def loss(self, frames: torch.Tensor, crop: int, generator: torch.Generator | None = None,
             speed: Speed = EAGER, prev: torch.Tensor | None = None, motion_weight: float = 0.0,
             motion_crops: float = 0.0) -> torch.Tensor:
        """EDM loss on random crop x crop squares of full-size uint8 frames [B, 3, H, W] (each
        frame its own square, at a multiple of `scale`), against their own downscale; with `prev`
        (the frames before), a pixel that moved counts 1 + `motion_weight` times, and a share
        `motion_crops` of the squares is placed over one (see `crops`)."""
        cfg = self.config
        base, target, level, moving = self.crops(frames, crop, generator, prev, motion_crops)
        sigma = edm.sample_sigmas(len(base), cfg.p_mean, cfg.p_std, cfg.sigma_min, cfg.sigma_max, base.device,
                                  generator)
        s = sigma[:, None, None, None]
        x = target + s * torch.randn(target.shape, device=base.device, generator=generator)
        out = self.inner(x, sigma, base, level, speed)
        target_f = (target - edm.c_skip(s, cfg.sigma_data) * x) / edm.c_out(s, cfg.sigma_data)
        return (((out - target_f) ** 2) * (1 + motion_weight * moving)).mean()

    @torch.no_grad()
    def upsample(self, low: torch.Tensor, sigmas: torch.Tensor, method: str = "euler", level: float = 0.0,
                 generator: torch.Generator | None = None, speed: Speed = EAGER,
                 noise: torch.Tensor | None = None) -> torch.Tensor:
        """Full-size frames [B, 3, H, W] from low ones [B, 3, h, w] (both in [-1, 1], the result
        rounded to 8-bit levels), sampled through `sigmas` (model.sampler.schedule's) from
        `noise` (N(0, I) [B, 3, H, W]; None: drawn from `generator`)."""
        b = low.shape[0]
        lv = low.new_full((b,), float(min(max(level, 0.0), self.config.cond_noise_max)))
        base = self.condition(low.float(), lv, generator)
        if noise is None:
            noise = torch.randn(base.shape, device=base.device, generator=generator)
        elif noise.shape != base.shape:
            raise ValueError(f"upsampler noise must be {list(base.shape)}, got {list(noise.shape)}")
        x = sample(lambda x, s: self(x, s, base, lv, speed), noise, sigmas, method, 0.0, generator)
        return quantize((base + x).clamp(-1, 1))


@dataclass
class Upsampling:
    """How a world's second stage runs in play and eval: the upsampler, its sampler settings
    (model.config.SamplerConfig: upsampler.sampler_steps and upsampler.method of the run) and
    the speed of its network. Called on low frames [B, 3, h, w], gives full-size ones."""

    model: Upsampler
    sampler: SamplerConfig
    speed: Speed = EAGER

    @property
    def scale(self) -> int:
        return self.model.scale

    def with_steps(self, steps: int | None, option: str = "--upsampler-steps") -> Upsampling:
        """A copy that draws a frame in `steps` sampler steps (None: as it is), checked."""
        from dreamcade.model.config import check_steps

        if steps is None:
            return self
        return Upsampling(self.model, replace(self.sampler, steps=check_steps(steps, option)), self.speed)

    def __call__(self, low: torch.Tensor, generator: torch.Generator | None = None,
                 noise: torch.Tensor | None = None) -> torch.Tensor:
        """Full-size uint8-level frames from `low`, from `noise` (None: fresh from `generator`)."""
        from dreamcade.model.sampler import schedule

        return self.model.upsample(low, schedule(self.sampler, low.device), self.sampler.method, 0.0, generator,
                                   self.speed, noise)

    def noise(self, batch: int, device: torch.device | str = "cpu",
              generator: torch.Generator | None = None) -> torch.Tensor:
        """N(0, I) noise for `batch` full-size frames: a session draws it once and upsamples every
        frame from it (model.world_env.WorldModelEnv), so a still part of the low frame is drawn
        the same from frame to frame instead of shimmering."""
        h, w = self.model.frame_size
        return torch.randn((batch, 3, h, w), device=device, generator=generator)


def upsampler_steps(upsampling: Upsampling | None, steps: int | None) -> Upsampling | None:
    """--upsampler-steps of play and eval: the world's upsampling drawing in `steps` steps; a
    ConfigError for a world of one stage."""
    if steps is not None and upsampling is None:
        raise ConfigError(f"--upsampler-steps {steps}: the model is of one stage (no upsampler); leave the option out")
    return None if upsampling is None else upsampling.with_steps(steps)


class Bicubic:
    """The low frames widened bicubically and rounded: the baseline an upsampler has to beat."""

    def __init__(self, scale: int) -> None:
        self.scale = scale

    def noise(self, batch: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> None:
        """It draws nothing (Upsampling.noise's place in a session)."""
        return None

    def __call__(self, low: torch.Tensor, generator: torch.Generator | None = None,
                 noise: torch.Tensor | None = None) -> torch.Tensor:
        wide = F.interpolate(low.float(), scale_factor=self.scale, mode="bicubic", align_corners=False)
        return quantize(wide.clamp(-1, 1))
