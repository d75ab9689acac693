"""Loading a model for inference, one way for play, eval, bench and train's samples: the file,
the device, the precision and the speed switches; and the check that a store's frames fit it."""

from __future__ import annotations

from pathlib import Path

import torch

from dataset.controls import ControlSpec
from dataset.store import Store, StoreError, open_store
from model.checkpoint import check_spec, load_model
from model.config import Config
from model.denoiser import Denoiser
from model.device import configure, resolve_device


def load_for_inference(path: str | Path, device: str = "auto", precision: str = "auto",
                       channels_last: bool = True, compile: bool = False,
                       expect_spec: ControlSpec | None = None) -> tuple[Denoiser, Config, dict, torch.device]:
    """(model in eval mode on its device, config, metadata, device) from a world folder
    (model.world), a run folder or a model file. CheckpointError names the file; DeviceError a device that is not here. `compile` uses
    CUDA graphs on CUDA (torch.compile mode "reduce-overhead")."""
    dev = resolve_device(device)
    if Path(path).is_dir() and (Path(path) / "config.json").is_file():  # a world folder
        from model.world import load_world  # diffusers is imported only for a world

        model, cfg, meta = load_world(path)
        check_spec(model.spec, expect_spec, path)
    else:
        model, cfg, meta = load_model(path, "cpu", expect_spec)
    mode = "reduce-overhead" if compile and dev.type == "cuda" else None
    return configure(model, dev, precision, channels_last, compile, mode).eval(), cfg, meta, dev


def training_store(cfg: Config) -> Store | None:
    """The first of the model's training stores that is here and opens, else None."""
    for p in cfg.data.stores:
        try:
            return open_store(p)
        except StoreError:
            continue
    return None


def trained_frame_shape(cfg: Config) -> tuple[int, int, int] | None:
    """(H, W, 3) of the frames the model was trained on, when one of its stores is here."""
    store = training_store(cfg)
    return None if store is None else store.frame_shape


def check_frames(store: Store, cfg: Config, model_name: str = "the model") -> None:
    """A store's frames must be the size the model was trained at (when its data is here to
    tell) and divide by the UNet's downsampling; StoreError says which size to build."""
    trained = trained_frame_shape(cfg)
    if trained is not None and trained != store.frame_shape:
        h, w = trained[:2]
        raise StoreError(f"{store.path}: frames are {store.width}x{store.height} but {model_name} was trained on "
                         f"{w}x{h}; build a store at that size (`python -m dataset build ... --size {w}x{h}`)")
    levels = 2 ** (len(cfg.model.channels) - 1)
    if store.width % levels or store.height % levels:
        raise StoreError(f"{store.path}: frames are {store.width}x{store.height}; {model_name} needs sizes "
                         f"that divide by {levels}")
