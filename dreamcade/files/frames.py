"""The frames a model was trained on, and the check that a store's frames fit it."""

from __future__ import annotations

from dreamcade.dataset.store import Store, StoreError, open_store
from dreamcade.model.config import Config
from dreamcade.model.denoiser import Denoiser


def training_store(cfg: Config) -> Store | None:
    """The first of the model's training stores that is here and opens, else None."""
    for p in cfg.data.stores:
        try:
            return open_store(p)
        except StoreError:
            continue
    return None


def trained_frame_size(model: Denoiser, cfg: Config) -> tuple[int, int] | None:
    """(height, width) of the frames the world shows: the size the model was trained on, its own
    record of it (for a model of format 1, which has none, its training data's when that is
    here), times upsampler.scale for the first of two stages."""
    if model.frame_size is not None:
        s = cfg.upsampler.scale
        return model.frame_size[0] * s, model.frame_size[1] * s
    store = training_store(cfg)
    return None if store is None else store.frame_shape[:2]


def check_frames(store: Store, model: Denoiser, cfg: Config, model_name: str = "the model") -> None:
    """A store's frames must be the size the model was trained at (any size: the network pads
    them to its own factor, model/unet.py), or, in a two-stage world, the size its upsampler
    makes; StoreError says which size to build."""
    trained = trained_frame_size(model, cfg)
    if trained is not None and tuple(trained) != store.frame_shape[:2]:
        h, w = trained
        raise StoreError(f"{store.path}: frames are {store.width}x{store.height} but {model_name} was trained on "
                         f"{w}x{h}; build a store at that size (`dreamcade data build ... --size {w}x{h}`)")
