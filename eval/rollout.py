"""Generating frames for evaluation through the one rollout object, WorldModelEnv.

The baselines below are predictors (dreamcade.model.world_env.Predictor), so they run through the very same
code as the model: the env, the one-step evaluation, the rollouts.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from dreamcade.dataset.batch import Batch
from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.pixels import downscale, hwc_to_model, model_to_hwc, to_model
from dreamcade.model.config import SamplerConfig
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.world_env import Predictor, predict_next


class RolloutEnv(Protocol):
    """reset from real context, then step(action) -> next frame (WorldModelEnv)."""

    sampler: SamplerConfig

    def reset(self, frames, actions, mask=None) -> torch.Tensor: ...

    def step(self, action) -> torch.Tensor:
        """action [B, A] -> uint8 [B, H, W, 3] on the CPU."""
        ...


class RepeatLast:
    """Baseline predictor: the next frame is the newest past frame (a frozen picture)."""

    def __init__(self, spec: ControlSpec, context: int) -> None:
        self.spec, self.context = spec, context

    def next_frame(self, context, actions, mask, sampler, generator=None) -> torch.Tensor:
        return context[:, -1].clone()


class MeanFrame(RepeatLast):
    """Baseline predictor: always the mean training frame (uint8 [H, W, 3]), whatever happens."""

    def __init__(self, spec: ControlSpec, context: int, frame: np.ndarray) -> None:
        super().__init__(spec, context)
        self.frame = hwc_to_model(np.asarray(frame, np.uint8))

    def next_frame(self, context, actions, mask, sampler, generator=None) -> torch.Tensor:
        return self.frame.to(context.device).expand(context.shape[0], -1, -1, -1).clone()


def one_step(predictor: Denoiser | Predictor, batch: Batch, sampler: SamplerConfig,
             generator: torch.Generator | None = None, speed: Speed = EAGER, upsampling=None) -> torch.Tensor:
    """Teacher-forced prediction of each window's last frame from its real past: uint8
    [B, H, W, 3] on the CPU. `batch` holds windows of L+1 steps on the predictor's device.
    With `upsampling` (a two-stage world's second stage, model/upsampler.py), the past is shrunk
    for the predictor and its frame upsampled."""
    L = predictor.context
    scale = 1 if upsampling is None else upsampling.scale
    frames = to_model(downscale(batch.frames[:, :L], scale)) if scale > 1 else batch.frames_float()[:, :L]
    with torch.no_grad():
        out = predict_next(predictor, frames, batch.actions[:, :L], batch.mask[:, :L], sampler, generator, speed)
        if upsampling is not None:
            out = upsampling(out, generator)
    return model_to_hwc(out)


def open_loop(env: RolloutEnv, context: np.ndarray, context_actions: np.ndarray, actions: np.ndarray,
              progress: bool = False, desc: str = "rollout") -> np.ndarray:
    """Reset `env` on real context (uint8 [B, L, H, W, 3], actions [B, L-1, A]) and feed it
    `actions` [B, T, A] one step at a time: actions[:, t] is held after the newest frame, so
    the result's frame t (uint8 [B, T, H, W, 3]) comes t + 1 steps after the context."""
    env.reset(context, context_actions)
    steps = range(actions.shape[1])
    out = [env.step(actions[:, t]).numpy() for t in tqdm(steps, desc=desc, disable=not progress, leave=False)]
    return np.stack(out, 1)
