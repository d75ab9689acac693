"""Exponential moving average of a model's weights."""

from __future__ import annotations

import copy

import torch
from torch import nn


def make_ema(model: nn.Module) -> nn.Module:
    ema = copy.deepcopy(model).eval()
    ema.requires_grad_(False)
    return ema


@torch.no_grad()
def update_ema(ema: nn.Module, model: nn.Module, decay: float, step: int) -> None:
    """ema <- d * ema + (1 - d) * model, with d warmed up as min(decay, (1 + step) / (10 + step))."""
    d = min(decay, (1 + step) / (10 + step))
    ema_params = [p for p in ema.parameters()]
    params = [p.detach() for p in model.parameters()]
    torch._foreach_lerp_(ema_params, params, 1 - d)
    for b_ema, b in zip(ema.buffers(), model.buffers()):
        b_ema.copy_(b)
