"""The ground floor: the recording store (read, write, validate), control specs, building
training stores, and the windowed torch Dataset. Nothing here imports record, model or above."""

from dataset.controls import BINARY, CONTINUOUS, Control, ControlSpec, SpecError
from dataset.store import FORMAT_NAME, FORMAT_VERSION, Episode, Store, StoreError, StoreWriter, open_store

__all__ = ["BINARY", "CONTINUOUS", "Control", "ControlSpec", "SpecError", "FORMAT_NAME",
           "FORMAT_VERSION", "Episode", "Store", "StoreError", "StoreWriter", "open_store"]
