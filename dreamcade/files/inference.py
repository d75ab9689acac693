"""Loading a model for inference, one way for play, eval, bench and train's samples: the file,
the device, the precision and the speed switches."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from dreamcade.dataset.controls import ControlSpec
from dreamcade.files.checkpoint import CheckpointError, check_spec, load_model, load_upsampler
from dreamcade.files.world import is_world, load_world, upsampler_folder
from dreamcade.model.config import Config
from dreamcade.model.denoiser import Denoiser, Speed
from dreamcade.model.device import configure, resolve_device
from dreamcade.model.runtime import Runtime
from dreamcade.model.upsampler import Upsampling, sampler_of


class Loaded(NamedTuple):
    """A model ready to run: call it with `speed` (autocast, compiled network); `upsampling`, the
    second stage of a two-stage world (model/upsampler.py), None for one stage."""

    model: Denoiser
    cfg: Config
    meta: dict
    device: torch.device
    speed: Speed
    upsampling: Upsampling | None = None


def load_upsampling(path: str | Path, cfg: Config, device: torch.device, runtime: Runtime = Runtime(),
                    mode: str | None = None) -> Upsampling | None:
    """The second stage of the model at `path`, on `device`, set up as `runtime` says, with the
    sampler settings its run gave it (upsampler.sampler_steps, upsampler.method); None for one stage."""
    folder = upsampler_folder(path, cfg)
    if folder is None:
        return None
    model, up_cfg, _ = load_upsampler(folder)
    if model.scale != cfg.upsampler.scale:
        raise CheckpointError(f"{folder}: an upsampler of scale {model.scale}, but the model's config says "
                              f"upsampler.scale {cfg.upsampler.scale}; export the world again")
    model, speed = configure(model, device, runtime.precision, runtime.channels_last, runtime.compile, mode)
    return Upsampling(model.eval(), sampler_of(up_cfg), speed)


def load_for_inference(path: str | Path, runtime: Runtime = Runtime(),
                       expect_spec: ControlSpec | None = None) -> Loaded:
    """(model in eval mode on its device, config, metadata, device, speed) from a world folder
    (dreamcade.files.world), a run folder or a model file, set up as `runtime` says (its compile
    uses CUDA graphs on CUDA: torch.compile mode "reduce-overhead"). CheckpointError names the
    file; DeviceError a device that is not here."""
    runtime.check()
    dev = resolve_device(runtime.device)
    if is_world(path):
        model, cfg, meta = load_world(path)
        check_spec(model.spec, expect_spec, path)
    else:
        model, cfg, meta = load_model(path, "cpu", expect_spec)
    mode = "reduce-overhead" if runtime.compile and dev.type == "cuda" else None
    model, speed = configure(model, dev, runtime.precision, runtime.channels_last, runtime.compile, mode)
    return Loaded(model.eval(), cfg, meta, dev, speed, load_upsampling(path, cfg, dev, runtime, mode))
