"""The ground floor: the recording store (read, write, validate), control specs, building
training stores, and the windowed torch Dataset. Nothing here imports record, model or above."""

from dataset.controls import BINARY, CONTINUOUS, Control, ControlSpec, SpecError
from dataset.store import FORMAT_NAME, FORMAT_VERSION, Episode, Store, StoreError, StoreWriter, open_store

__all__ = ["BINARY", "CONTINUOUS", "Control", "ControlSpec", "SpecError", "FORMAT_NAME",
           "FORMAT_VERSION", "Episode", "Store", "StoreError", "StoreWriter", "open_store"]

_LAZY = {"Batch": "dataset.batch", "WindowDataset": "dataset.windows", "make_loader": "dataset.windows",
         "NoEpisodesError": "dataset.windows", "AllDamagedError": "dataset.windows",
         "BuildOptions": "dataset.build", "build": "dataset.build"}


def __getattr__(name: str):
    """Torch-backed parts load on first use, so recording never pays for importing torch."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dataset' has no attribute {name!r}")
