"""The preconditioned denoiser D(x; sigma, context, actions) around the network F, and its
training loss with context noise augmentation. Sampling it into frames: model/sampler.py.

The denoiser is a diffusers model (ModelMixin, ConfigMixin): its registered arguments are flat,
the network's and the diffusion's settings (model.* and diffusion.* of the run config), the
context length, the control spec and the frame size it was trained at, so a saved model folder
(config.json + diffusion_pytorch_model.safetensors) says everything needed to rebuild it, and
`Denoiser.from_pretrained(FOLDER/model)` loads it as any diffusers model."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config

from dreamcade.dataset.batch import Batch
from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.pixels import moved
from dreamcade.model import edm
from dreamcade.model.conditioning import Conditioner
from dreamcade.model.config import ConfigError, DiffusionConfig, NetworkConfig
from dreamcade.model.unet import UNet

@dataclass(frozen=True)
class Speed:
    """How the network runs, an argument of every call (never kept on the model): `autocast`,
    the dtype of the network's autocast (None: float32); `network`, a compiled network to run in
    place of the model's own (torch.compile of model.net: the same weights). model.device.configure
    makes one; the default is float32 and eager."""

    autocast: torch.dtype | None = None
    network: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    def __call__(self, net: torch.nn.Module, inp: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """net(inp, cond), or the compiled network in its place, under autocast when asked, in float32."""
        run = net if self.network is None else self.network
        cast = torch.autocast(inp.device.type, dtype=self.autocast) if self.autocast else contextlib.nullcontext()
        with cast:
            return run(inp, cond).float()


EAGER = Speed()

NETWORK = tuple(f.name for f in fields(NetworkConfig))
DIFFUSION = tuple(f.name for f in fields(DiffusionConfig))


class Denoiser(ModelMixin, ConfigMixin):
    """D(x; sigma) = c_skip x + c_out F(c_in x, c_noise, cond) (Karras et al. 2022, Eq. 7), with
    the L past frames concatenated to F's input on channels."""

    config_name = "config.json"

    @register_to_config
    def __init__(self, *, frame_size: list[int] | None, control_spec: dict, context: int,
                 channels: list[int], blocks: int, attention_levels: list[int], cond_dim: int, action_dim: int,
                 groups: int, sigma_data: float, p_mean: float, p_std: float, sigma_min: float, sigma_max: float,
                 offset_noise: float, residual: bool, context_noise_max: float, motion_weight: float,
                 action_drop: float = 0.0) -> None:
        super().__init__()
        args = locals()
        net = NetworkConfig(**{k: args[k] for k in NETWORK})
        self.diffusion = DiffusionConfig(**{k: args[k] for k in DIFFUSION})
        net.check()
        self.diffusion.check()
        if frame_size is not None and not (isinstance(frame_size, (list, tuple)) and len(frame_size) == 2
                                           and all(isinstance(x, int) and x > 0 for x in frame_size)):
            raise ConfigError(f"frame_size {frame_size!r}: [height, width] in pixels")
        if not isinstance(context, int) or context < 1:
            raise ConfigError(f"context {context!r}: the past frames the model sees, at least 1")
        self.spec = ControlSpec.from_dict(control_spec, where="control_spec")
        self.context = context
        self.frame_size = None if frame_size is None else (int(frame_size[0]), int(frame_size[1]))
        """(height, width) of the frames it was trained on; None only for a model of format 1."""
        self.net = UNet(3 * (context + 1), 3, net)
        self.cond = Conditioner(self.spec, context, net.action_dim, net.cond_dim)

    @classmethod
    def build(cls, net: NetworkConfig, diffusion: DiffusionConfig, spec: ControlSpec, context: int,
              frame_size: tuple[int, int] | None) -> Denoiser:
        """A new denoiser for frames of `frame_size` (height, width) from a run's config sections."""
        size = None if frame_size is None else [int(frame_size[0]), int(frame_size[1])]
        return cls(frame_size=size, control_spec=spec.to_dict(), context=context, **asdict(net), **asdict(diffusion))

    @classmethod
    def init_keys(cls) -> list[str]:
        """The names of the registered arguments (config.json's keys besides the private ones)."""
        return [name for name in inspect.signature(cls.__init__).parameters if name != "self"]

    @classmethod
    def arguments(cls, raw: dict) -> dict:
        """The registered arguments out of a config.json mapping; one added since the folder was
        saved (it has a default: diffusion.action_drop) takes its default. KeyError for a
        missing one without."""
        params = inspect.signature(cls.__init__).parameters
        return {k: raw[k] if k in raw or params[k].default is inspect.Parameter.empty else params[k].default
                for k in cls.init_keys()}

    def inner(self, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor, ctx_sigma: torch.Tensor,
              actions: torch.Tensor, mask: torch.Tensor, speed: Speed = EAGER,
              dropped: torch.Tensor | None = None) -> torch.Tensor:
        """F's output for noisy x [B, 3, H, W] at sigma [B], in float32; where `dropped` [B] is
        True, without the actions (diffusion.action_drop)."""
        b, steps, c, h, w = context.shape
        sd = self.diffusion.sigma_data
        s = sigma[:, None, None, None]
        inp = torch.cat([edm.c_in(s, sd) * x, context.reshape(b, steps * c, h, w)], dim=1)  # [B, 3(L+1), H, W]
        cond = self.cond(edm.c_noise(sigma), ctx_sigma, actions, mask, dropped)
        return speed(self.net, inp, cond)

    def forward(self, x: torch.Tensor, sigma: torch.Tensor, context: torch.Tensor, ctx_sigma: torch.Tensor,
                actions: torch.Tensor, mask: torch.Tensor, speed: Speed = EAGER,
                dropped: torch.Tensor | None = None) -> torch.Tensor:
        """D: the denoised estimate of the next frame, [B, 3, H, W] in [-1, 1] units."""
        s = sigma[:, None, None, None]
        sd = self.diffusion.sigma_data
        out = self.inner(x, sigma, context, ctx_sigma, actions, mask, speed, dropped)
        return edm.c_skip(s, sd) * x + edm.c_out(s, sd) * out

    def loss(self, batch: Batch, generator: torch.Generator | None = None, speed: Speed = EAGER) -> torch.Tensor:
        """EDM loss on the last frame of each window, given the L frames and actions before it,
        with context noise augmentation (and diffusion.motion_weight on the pixels that change).
        Computed on F's output: lambda(sigma) ||D - y||^2 equals ||F - (y - c_skip x) / c_out||^2
        exactly."""
        frames = batch.frames_float()  # [B, L+1, 3, H, W]
        b, L = frames.shape[0], self.context
        cfg, dev = self.diffusion, frames.device
        sigma = edm.sample_sigmas(b, cfg.p_mean, cfg.p_std, cfg.sigma_min, cfg.sigma_max, dev, generator)
        noise = torch.randn(frames[:, L].shape, device=dev, generator=generator)
        if cfg.offset_noise > 0:
            noise = noise + cfg.offset_noise * torch.randn((b, 3, 1, 1), device=dev, generator=generator)
        context, ctx_sigma = self.noisy_context(frames[:, :L], generator)
        target = frames[:, L] - self.base(context)  # against the context as the network sees it
        s = sigma[:, None, None, None]
        x = target + s * noise
        dropped = None
        if cfg.action_drop > 0:  # drawn after the rest, so a run without it draws what it always did
            dropped = torch.rand(b, device=dev, generator=generator) < cfg.action_drop
        out = self.inner(x, sigma, context, ctx_sigma, batch.actions[:, :L], batch.mask[:, :L], speed, dropped)
        target_f = (target - edm.c_skip(s, cfg.sigma_data) * x) / edm.c_out(s, cfg.sigma_data)
        err = (out - target_f) ** 2
        if cfg.motion_weight > 0:
            err = err * self.motion_weights(frames[:, L - 1], frames[:, L])
        return err.mean()

    def motion_weights(self, last: torch.Tensor, nxt: torch.Tensor) -> torch.Tensor:
        """Per-pixel loss weights [B, 1, H, W]: 1 + diffusion.motion_weight where any channel
        changed by more than MOVE_LEVELS of 255 levels from the (clean) last frame to the next."""
        return 1 + self.diffusion.motion_weight * moved(last, nxt).float()

    def noisy_context(self, context: torch.Tensor, generator: torch.Generator | None = None,
                      level: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Context noise augmentation (GameNGen): the past frames [B, L, 3, H, W] plus Gaussian
        noise of a level drawn uniformly in [0, context_noise_max] per sample (training), or of
        the given `level` (generating); returns them and the levels [B] the network is told."""
        b, dev = context.shape[0], context.device
        if level is None:
            top = self.diffusion.context_noise_max
            ctx_sigma = torch.rand(b, device=dev, generator=generator) * top if top > 0 else torch.zeros(b, device=dev)
        else:
            ctx_sigma = torch.full((b,), float(level), device=dev)
        if not (ctx_sigma > 0).any():
            return context, ctx_sigma
        noise = torch.randn(context.shape, device=dev, generator=generator)
        return context + ctx_sigma[:, None, None, None, None] * noise, ctx_sigma

    def base(self, context: torch.Tensor) -> torch.Tensor:
        """What the diffused quantity is relative to: the last past frame as the network sees it,
        context noise included (residual), or 0. Taken against a clean frame instead, the network
        would never learn to correct its base, and every artifact of a generated frame would be
        carried forward into the next (a random walk)."""
        return context[:, -1] if self.diffusion.residual else torch.zeros_like(context[:, -1])
