"""The world-model environment: reset from real context, then step(action) -> next frame.
The one rollout object for play.py and eval (DIAMOND's WorldModelEnv), batched."""

from __future__ import annotations

import numpy as np
import torch

from model.config import SamplerConfig
from model.denoiser import Denoiser
from model.sampler import to_uint8


def _frames_in(frames, device: torch.device) -> torch.Tensor:
    """uint8 frames [B, L, H, W, 3] (numpy or torch) -> float [B, L, 3, H, W] in [-1, 1]."""
    t = torch.as_tensor(np.asarray(frames) if not torch.is_tensor(frames) else frames)
    if t.dtype != torch.uint8 or t.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [..., H, W, 3], got {t.dtype} {list(t.shape)}")
    return t.to(device).permute(0, 1, 4, 2, 3).float().div(127.5).sub(1.0)


class WorldModelEnv:
    """Rolling buffers of the last L frames and actions on the model's device.

    `actions[:, i]` is the input held after `frames[:, i]`; the one after the newest frame is
    the argument of the next step(). The sampler settings (steps, context noise, method) can be
    changed between steps.
    """

    def __init__(self, model: Denoiser, sampler: SamplerConfig, device: torch.device | str = "cpu",
                 seed: int | None = None) -> None:
        self.model, self.sampler = model.eval(), SamplerConfig(**vars(sampler))
        self.device = torch.device(device)
        self.L, self.A = model.context, len(model.spec)
        self.generator = torch.Generator(self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        self.frames = self.actions = self.mask = None
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
        self.frames = _frames_in(frames, self.device)
        self.actions = torch.zeros(b, L, self.A, device=self.device)
        self.actions[:, : L - 1] = actions[:, : L - 1].to(self.device).float()
        self.mask = (torch.ones(b, L, dtype=torch.bool) if mask is None else torch.as_tensor(mask)).to(self.device)
        self.t = 0
        return self.frames_uint8(self.frames[:, -1])

    @torch.inference_mode()
    def step(self, action) -> torch.Tensor:
        """Apply `action` [B, A] (or [A]) to the newest frame; returns the generated next frame,
        uint8 [B, H, W, 3] on the CPU."""
        if self.frames is None:
            raise RuntimeError("call reset() before step()")
        a = torch.as_tensor(np.asarray(action, np.float32) if not torch.is_tensor(action) else action)
        a = a.to(self.device).float().reshape(-1, self.A).expand(self.batch_size, self.A)
        self.actions[:, -1] = a
        nxt = self.model.generate(self.frames, self.actions, self.mask, self.sampler, self.generator)
        self.frames = torch.cat([self.frames[:, 1:], nxt[:, None]], dim=1)  # [B, L, 3, H, W]
        self.actions = torch.cat([self.actions[:, 1:], torch.zeros_like(self.actions[:, :1])], dim=1)
        self.mask = torch.cat([self.mask[:, 1:], torch.ones_like(self.mask[:, :1])], dim=1)
        self.t += 1
        return self.frames_uint8(nxt)

    @staticmethod
    def frames_uint8(x: torch.Tensor) -> torch.Tensor:
        """float [B, 3, H, W] in [-1, 1] -> uint8 [B, H, W, 3] on the CPU."""
        return to_uint8(x).permute(0, 2, 3, 1).cpu()
