"""The world-model environment: reset from real context, then step(action) -> next frame.
The one rollout object for play.py, eval and train's samples (DIAMOND's WorldModelEnv), batched.

It drives a Denoiser through the sampler (model.sampler.next_frame), or any predictor with a
`next_frame(context, actions, mask, sampler, generator)` method and `context` and `spec`
attributes (eval's baselines: repeat the last frame, the mean frame).
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np
import torch

from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.pixels import downscale, hwc_to_model, model_to_hwc, to_model
from dreamcade.model.config import SamplerConfig
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.sampler import next_frame


class Predictor(Protocol):
    """Predicts the next frame from L past frames and the actions held after each."""

    context: int
    spec: ControlSpec

    def next_frame(self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                   sampler: SamplerConfig, generator: torch.Generator | None = None) -> torch.Tensor:
        """context float [B, L, 3, H, W] in [-1, 1], actions [B, L, A] -> [B, 3, H, W] in [-1, 1]."""
        ...


def predict_next(model: Denoiser | Predictor, context: torch.Tensor, actions: torch.Tensor,
                 mask: torch.Tensor | None, sampler: SamplerConfig,
                 generator: torch.Generator | None = None, speed: Speed = EAGER) -> torch.Tensor:
    """The next frame [B, 3, H, W] from a Denoiser (sampled, run at `speed`) or a Predictor."""
    if isinstance(model, Denoiser):
        return next_frame(model, context, actions, mask, sampler, generator, speed)
    return model.next_frame(context, actions, mask, sampler, generator)


class WorldModelEnv:
    """Rolling buffers of the last L frames and actions on the model's device.

    `actions[:, i]` is the input held after `frames[:, i]`; the one after the newest frame is
    the argument of the next step(). The sampler settings (steps, context noise, method) can be
    changed between steps. `speed`: how a Denoiser's network runs (model.device.configure's).

    `upsampling`, the second stage of a two-stage world (model/upsampler.py: an Upsampling, or
    Bicubic for its baseline): the frames in and out are then the size the world shows, and the
    model runs on them shrunk `upsampling.scale` times (dataset.pixels.downscale); the frames it
    makes are upsampled before they are returned, and `low` holds the last one as it made it.
    """

    def __init__(self, model: Denoiser | Predictor, sampler: SamplerConfig, device: torch.device | str = "cpu",
                 seed: int | None = None, speed: Speed = EAGER, upsampling=None) -> None:
        self.model = model.eval() if isinstance(model, torch.nn.Module) else model
        self.speed = speed
        self.upsampling = upsampling
        self.scale = 1 if upsampling is None else upsampling.scale
        self.low: torch.Tensor | None = None
        self.up_noise: torch.Tensor | None = None
        """The upsampler's noise, drawn at reset and kept for the session: with noise drawn afresh
        every frame the full-size frame shimmered where the low one stood still (Breakout at
        128x128: 5 times the recording's change from frame to frame, out of the healthy band from
        the first window; docs/recipe.md#screen-size)."""
        self.stage_s = {"dynamics": 0.0, "upsampler": 0.0}
        """Seconds spent in each stage's step() so far (for the benches' ms per stage)."""
        self.sampler = SamplerConfig(**vars(sampler))
        self.device = torch.device(device)
        self.L, self.A = model.context, len(model.spec)
        self.generator = torch.Generator(self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        self.frames = self.actions = self.mask = self.shown = None
        self.t = 0

    @property
    def batch_size(self) -> int:
        return 0 if self.frames is None else self.frames.shape[0]

    def reset(self, frames, actions, mask=None) -> torch.Tensor:
        """Start from real context: frames uint8 [B, L, H, W, 3] (or [L, H, W, 3]), the actions
        between them [B, L-1, A] (an [B, L, A] array's last row is ignored), mask [B, L] (False
        for padded steps; default all real). Returns the newest context frame, uint8 [B, H, W, 3]."""
        frames = torch.as_tensor(np.asarray(frames)) if not torch.is_tensor(frames) else frames
        actions = torch.as_tensor(np.asarray(actions, np.float32)) if not torch.is_tensor(actions) else actions
        if frames.ndim == 4:
            frames, actions = frames[None], actions[None]
            mask = None if mask is None else torch.as_tensor(mask)[None]
        b, L = frames.shape[:2]
        if L != self.L:
            raise ValueError(f"the model needs {self.L} context frames, got {L}")
        if actions.shape[1] not in (L - 1, L) or actions.shape[2] != self.A:
            raise ValueError(f"actions must be [B, {L - 1}, {self.A}], got {list(actions.shape)}")
        full = hwc_to_model(frames[:, -1], self.device)
        self.frames = to_model(downscale(frames.movedim(-1, -3), self.scale)).to(self.device)
        self.shown = frames.cpu().clone() if self.upsampling is not None else None
        self.actions = torch.zeros(b, L, self.A, device=self.device)
        self.actions[:, : L - 1] = actions[:, : L - 1].to(self.device).float()
        self.mask = (torch.ones(b, L, dtype=torch.bool) if mask is None else torch.as_tensor(mask)).to(self.device)
        self.t = 0
        self.low = None
        self.up_noise = None if self.upsampling is None else self.upsampling.noise(b, self.device, self.generator)
        return model_to_hwc(full)

    @torch.inference_mode()
    def step(self, action) -> torch.Tensor:
        """Apply `action` [B, A] (or [A]) to the newest frame; returns the generated next frame,
        uint8 [B, H, W, 3] on the CPU (upsampled, in a two-stage world)."""
        if self.frames is None:
            raise RuntimeError("call reset() before step()")
        a = torch.as_tensor(np.asarray(action, np.float32) if not torch.is_tensor(action) else action)
        a = a.to(self.device).float().reshape(-1, self.A).expand(self.batch_size, self.A)
        self.actions[:, -1] = a
        t0 = time.perf_counter()
        nxt = predict_next(self.model, self.frames, self.actions, self.mask, self.sampler, self.generator, self.speed)
        self.frames = torch.cat([self.frames[:, 1:], nxt[:, None]], dim=1)  # [B, L, 3, H, W]
        self.actions = torch.cat([self.actions[:, 1:], torch.zeros_like(self.actions[:, :1])], dim=1)
        self.mask = torch.cat([self.mask[:, 1:], torch.ones_like(self.mask[:, :1])], dim=1)
        self.t += 1
        if self.upsampling is None:
            out = model_to_hwc(nxt)
            self.stage_s["dynamics"] += time.perf_counter() - t0
            return out
        if nxt.is_cuda:  # the time of each stage, not of the queue
            torch.cuda.synchronize(nxt.device)
        t1 = time.perf_counter()
        self.low = nxt
        out = model_to_hwc(self.upsampling(nxt, self.generator, self.up_noise))
        self.stage_s["dynamics"] += t1 - t0
        self.stage_s["upsampler"] += time.perf_counter() - t1
        self.shown = torch.cat([self.shown[:, 1:], out[:, None]], dim=1)
        return out

    def frames_uint8(self) -> np.ndarray:
        """The context now held, uint8 [B, L, H, W, 3], as shown: in a two-stage world the real
        context frames and the upsampled ones (the model holds them shrunk)."""
        if self.shown is not None:
            return self.shown.numpy()
        return model_to_hwc(self.frames).numpy()
