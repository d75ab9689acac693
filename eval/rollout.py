"""Generating frames for evaluation through the one rollout object, WorldModelEnv.

Two small protocols say what eval needs, so a stand-in can take the model's place:
`FramePredictor` is what WorldModelEnv drives (the Denoiser satisfies it: `context`, `spec`,
`eval()`, `generate(...)`), and `RolloutEnv` is what an open-loop rollout steps (WorldModelEnv
satisfies it). The baselines below are predictors too, so they run through the very same code.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch
from tqdm import tqdm

from dataset.batch import Batch
from dataset.controls import ControlSpec
from model.config import SamplerConfig
from model.env import WorldModelEnv


class FramePredictor(Protocol):
    """Predicts the next frame from L past frames and the actions held after each."""

    context: int
    spec: ControlSpec

    def eval(self) -> FramePredictor: ...

    def generate(self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                 sampler: SamplerConfig, generator: torch.Generator | None = None) -> torch.Tensor:
        """context float [B, L, 3, H, W] in [-1, 1], actions [B, L, A] -> [B, 3, H, W] in [-1, 1]."""
        ...


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

    def eval(self) -> RepeatLast:
        return self

    def generate(self, context, actions, mask, sampler, generator=None) -> torch.Tensor:
        return context[:, -1].clone()


class MeanFrame(RepeatLast):
    """Baseline predictor: always the mean training frame (uint8 [H, W, 3]), whatever happens."""

    def __init__(self, spec: ControlSpec, context: int, frame: np.ndarray) -> None:
        super().__init__(spec, context)
        self.frame = torch.from_numpy(np.asarray(frame, np.uint8)).permute(2, 0, 1).float() / 127.5 - 1

    def generate(self, context, actions, mask, sampler, generator=None) -> torch.Tensor:
        return self.frame.to(context.device).expand(context.shape[0], -1, -1, -1).clone()


def one_step(predictor: FramePredictor, batch: Batch, sampler: SamplerConfig,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Teacher-forced prediction of each window's last frame from its real past: uint8
    [B, H, W, 3] on the CPU. `batch` holds windows of L+1 steps on the predictor's device."""
    L = predictor.context
    frames = batch.frames_float()
    with torch.no_grad():
        out = predictor.generate(frames[:, :L], batch.actions[:, :L], batch.mask[:, :L], sampler, generator)
    return WorldModelEnv.frames_uint8(out)


def open_loop(env: RolloutEnv, context: np.ndarray, context_actions: np.ndarray, actions: np.ndarray,
              progress: bool = False, desc: str = "rollout") -> np.ndarray:
    """Reset `env` on real context (uint8 [B, L, H, W, 3], actions [B, L-1, A]) and feed it
    `actions` [B, T, A] one step at a time: actions[:, t] is held after the newest frame, so
    the result's frame t (uint8 [B, T, H, W, 3]) comes t + 1 steps after the context."""
    env.reset(context, context_actions)
    steps = range(actions.shape[1])
    out = [env.step(actions[:, t]).numpy() for t in tqdm(steps, desc=desc, disable=not progress, leave=False)]
    return np.stack(out, 1)
