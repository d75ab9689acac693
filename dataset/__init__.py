"""The ground floor: the recording store (read, write, validate), control specs, building
training stores, and the windowed torch Dataset. Nothing here imports record, model or above."""

from dreamcade.dataset.controls import BINARY, CONTINUOUS, Control, ControlSpec, SpecError
from dreamcade.dataset.store import FORMAT_NAME, FORMAT_VERSION, Episode, Store, StoreError, StoreWriter, open_store

__all__ = ["BINARY", "CONTINUOUS", "Control", "ControlSpec", "SpecError", "FORMAT_NAME",
           "FORMAT_VERSION", "Episode", "Store", "StoreError", "StoreWriter", "open_store"]

_LAZY = {"Batch": "dreamcade.dataset.batch", "WindowDataset": "dreamcade.dataset.windows", "make_loader": "dreamcade.dataset.windows",
         "NoEpisodesError": "dreamcade.dataset.windows", "AllDamagedError": "dreamcade.dataset.windows",
         "BuildOptions": "dreamcade.dataset.build", "build": "dreamcade.dataset.build"}


def __getattr__(name: str):
    """Torch-backed parts load on first use, so recording never pays for importing torch."""
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dataset' has no attribute {name!r}")
