"""The conditioning vector: noise level, context noise level and the past actions, summed."""

from __future__ import annotations

import torch
from torch import nn

from dreamcade.dataset.controls import CONTINUOUS, ControlSpec
from dreamcade.model.unet import FourierFeatures


class ActionEncoder(nn.Module):
    """Actions of the L context steps [B, L, A] (any control spec) -> [B, cond_dim].

    Continuous controls are scaled from their nominal [low, high] to [-1, 1] (and clipped at
    +-3 so a mouse flick stays finite); binary ones stay 0/1. Each step gets the mask bit (False
    for padding before the episode start) and a learned position embedding.
    """

    def __init__(self, spec: ControlSpec, steps: int, action_dim: int, cond_dim: int) -> None:
        super().__init__()
        a = len(spec)
        cont = torch.tensor([c.kind == CONTINUOUS for c in spec.controls])
        self.register_buffer("low", torch.tensor([c.low for c in spec.controls]).where(cont, torch.tensor(0.0)))
        self.register_buffer("span", torch.tensor([c.high - c.low for c in spec.controls]).where(cont, torch.tensor(2.0)))
        self.register_buffer("continuous", cont)
        self.step_in = nn.Linear(a + 1, action_dim)
        self.position = nn.Parameter(torch.zeros(steps, action_dim))
        self.mlp = nn.Sequential(nn.Linear(steps * action_dim, cond_dim), nn.SiLU(), nn.Linear(cond_dim, cond_dim))

    def normalize(self, actions: torch.Tensor) -> torch.Tensor:
        scaled = (2 * (actions - self.low) / self.span - 1).clamp(-3, 3)
        return torch.where(self.continuous, scaled, actions)

    def forward(self, actions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, steps, a = actions.shape
        x = torch.cat([self.normalize(actions.float()), mask.float()[..., None]], dim=-1)  # [B, L, A+1]
        x = self.step_in(x) + self.position  # [B, L, action_dim]
        return self.mlp(x.reshape(b, -1))  # [B, cond_dim]


def context_level_feature(ctx_sigma: torch.Tensor) -> torch.Tensor:
    """A smooth, bounded input for the context noise level: 0 at sigma 0, ~1.15 at sigma 1."""
    return torch.log1p(ctx_sigma / 0.01) / 4


class Conditioner(nn.Module):
    """cond = MLP(Fourier(c_noise)) + MLP(Fourier(context level)) + ActionEncoder(actions), the
    last left out (zero) for the samples `dropped` marks: the model without the input, which
    guidance on the input (sampler.guidance) sets against the model with it."""

    def __init__(self, spec: ControlSpec, steps: int, action_dim: int, cond_dim: int) -> None:
        super().__init__()
        self.noise = nn.Sequential(FourierFeatures(cond_dim), nn.Linear(cond_dim, cond_dim), nn.SiLU(),
                                   nn.Linear(cond_dim, cond_dim))
        self.context_noise = nn.Sequential(FourierFeatures(cond_dim, scale=1.0), nn.Linear(cond_dim, cond_dim),
                                           nn.SiLU(), nn.Linear(cond_dim, cond_dim))
        self.actions = ActionEncoder(spec, steps, action_dim, cond_dim)

    def forward(self, c_noise: torch.Tensor, ctx_sigma: torch.Tensor, actions: torch.Tensor,
                mask: torch.Tensor, dropped: torch.Tensor | None = None) -> torch.Tensor:
        acts = self.actions(actions, mask)
        if dropped is not None:
            acts = acts * (~dropped)[:, None].to(acts.dtype)
        return self.noise(c_noise) + self.context_noise(context_level_feature(ctx_sigma)) + acts
