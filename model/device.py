"""Device and speed switches shared by training, play and eval: one code path for CPU and CUDA.\nThe options that choose them: model/runtime.py."""

from __future__ import annotations

import torch

from dreamcade.model.denoiser import Denoiser, Speed
from dreamcade.model.runtime import DEVICES, DeviceError


def resolve_device(name: str = "auto") -> torch.device:
    """auto: CUDA when torch sees it, else the CPU; cuda without a GPU is a DeviceError."""
    if name not in DEVICES:
        raise DeviceError(f"device {name!r}: choose one of {', '.join(DEVICES)}")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda, but torch sees no CUDA GPU (CPU build of torch, or no "
                          "driver); use --device cpu or install a CUDA build of torch")
    return torch.device(name)


def autocast_dtype(device: torch.device, precision: str = "auto") -> torch.dtype | None:
    """bf16 autocast on CUDA by default; none (fp32) on the CPU unless asked for."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    return {"no": None, "bf16": torch.bfloat16}[precision]


def configure(model: Denoiser, device: torch.device, precision: str = "auto", channels_last: bool = True,
              compile: bool = False, compile_mode: str | None = None) -> tuple[Denoiser, Speed]:
    """The model on `device` (in channels_last memory when asked: a layout of its weights), and
    the Speed to call it with: autocast around the network only, and torch.compile of the network
    (mode "reduce-overhead" uses CUDA graphs). Nothing is set on the model."""
    model = model.to(device)
    if channels_last:
        model.net = model.net.to(memory_format=torch.channels_last)
    network = torch.compile(model.net, mode=compile_mode) if compile else None
    return model, Speed(autocast_dtype(device, precision), network)
