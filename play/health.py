"""The play window's live health figure: how sharp the generated frames are next to real ones."""

from __future__ import annotations

import numpy as np

from eval.health import sharpness

HEALTH_RANGE = (0.5, 2.0)  # sharpness of the generated frames over that of real ones, outside = bad


class Health:
    """A live health figure: the sharpness of the generated frames over that of real frames,
    averaged over about `window` frames; 1 is like the data, below 0.5 is a blur, above 2 noise."""

    def __init__(self, real_frames: np.ndarray, window: int = 30) -> None:
        self.reference = float(sharpness(np.asarray(real_frames)).mean())
        self.alpha, self.value = 1.0 / window, None

    def update(self, frame: np.ndarray) -> float | None:
        if self.reference < 1e-6:
            return None  # flat real frames: nothing to compare with
        r = float(sharpness(np.asarray(frame)[None])[0]) / self.reference
        self.value = r if self.value is None else self.value + self.alpha * (r - self.value)
        return self.value

    @property
    def warning(self) -> str | None:
        if self.value is None or HEALTH_RANGE[0] <= self.value <= HEALTH_RANGE[1]:
            return None
        kind = "blurring" if self.value < HEALTH_RANGE[0] else "turning to noise"
        return f"frames are {kind}: press R to reset, or raise the context noise (=)"
