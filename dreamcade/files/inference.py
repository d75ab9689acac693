"""Loading a model for inference, one way for play, eval, bench and train's samples: the file,
the device, the precision and the speed switches."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch

from dreamcade.dataset.controls import ControlSpec
from dreamcade.files.checkpoint import check_spec, load_model
from dreamcade.files.world import is_world, load_world
from dreamcade.model.config import Config
from dreamcade.model.denoiser import Denoiser, Speed
from dreamcade.model.device import configure, resolve_device
from dreamcade.model.runtime import Runtime


class Loaded(NamedTuple):
    """A model ready to run: call it with `speed` (autocast, compiled network)."""

    model: Denoiser
    cfg: Config
    meta: dict
    device: torch.device
    speed: Speed


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
    return Loaded(model.eval(), cfg, meta, dev, speed)
