"""The frames a model was trained on, and the check that a store's frames fit it."""

from __future__ import annotations

from dreamcade.dataset.store import Store, StoreError, open_store
from dreamcade.model.config import Config


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
                         f"{w}x{h}; build a store at that size (`dreamcade data build ... --size {w}x{h}`)")
    levels = 2 ** (len(cfg.model.channels) - 1)
    if store.width % levels or store.height % levels:
        raise StoreError(f"{store.path}: frames are {store.width}x{store.height}; {model_name} needs sizes "
                         f"that divide by {levels}")
