"""Pixel conversions, one home for each: stored frames are uint8 [..., H, W, 3]; the model works
on float32 [..., 3, H, W] in [-1, 1] (0 -> -1, 255 -> 1); the metrics on [0, 1] (a level is 1/255)."""

from __future__ import annotations

import numpy as np
import torch


LEVEL = 2 / 255
"""One 8-bit level in the model's [-1, 1] units."""

MOVE_LEVELS = 4
"""A pixel moved when a channel changed by more than this many levels (of 255) from one frame to
the next: less is the noise of a recording (the motion weights of both stages count this)."""


def to_model(x: torch.Tensor) -> torch.Tensor:
    """uint8 (any layout) -> float32 in [-1, 1], same layout."""
    return x.float().div(127.5).sub(1.0)


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """float in [-1, 1] (any layout) -> uint8, rounded to the nearest level and clamped."""
    return x.add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8)


def quantize(x: torch.Tensor) -> torch.Tensor:
    """Round frames in [-1, 1] to the 256 levels of 8-bit images (what gets fed back)."""
    return to_model(to_uint8(x))


def hwc_to_model(frames, device: torch.device | str = "cpu") -> torch.Tensor:
    """uint8 [..., H, W, 3] (numpy or torch) -> float32 [..., 3, H, W] in [-1, 1] on `device`."""
    return to_model(_hwc(frames).to(device).movedim(-1, -3))


def to_unit(x: torch.Tensor) -> torch.Tensor:
    """Frames as float32 in [0, 1] (the metrics' units), same layout: uint8 are divided by 255,
    floats are taken as the model's [-1, 1]."""
    if x.dtype == torch.uint8:
        return x.float() / 255.0
    return (x.float() + 1.0) / 2.0


def hwc_to_unit(frames) -> torch.Tensor:
    """uint8 [..., H, W, 3] (numpy or torch) -> float32 [..., 3, H, W] in [0, 1], on the CPU."""
    return to_unit(_hwc(frames).movedim(-1, -3))


def _hwc(frames) -> torch.Tensor:
    """Stored frames as a uint8 tensor [..., H, W, 3], or a ValueError that says what came."""
    t = frames if torch.is_tensor(frames) else torch.from_numpy(np.ascontiguousarray(frames))
    if t.dtype != torch.uint8 or t.ndim < 3 or t.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [..., H, W, 3], got {t.dtype} {list(t.shape)}")
    return t


def model_to_hwc(x: torch.Tensor) -> torch.Tensor:
    """float [..., 3, H, W] in [-1, 1] -> uint8 [..., H, W, 3] on the CPU."""
    return to_uint8(x).movedim(-3, -1).cpu()


def moved(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Where a pixel moved (see MOVE_LEVELS) between frames [..., 3, H, W], both uint8 or both in
    the model's [-1, 1]: bool [..., 1, H, W]."""
    if before.dtype == torch.uint8:
        change = (after.int() - before.int()).abs() > MOVE_LEVELS
    else:  # half a level of margin: 8-bit frames in model units are not exact multiples of LEVEL
        change = (after - before).abs() > (MOVE_LEVELS + 0.5) * LEVEL
    return change.any(-3, keepdim=True)


def downscale(frames: torch.Tensor, scale: int) -> torch.Tensor:
    """uint8 frames [..., 3, H, W] -> uint8 [..., 3, H/scale, W/scale] by the very area resize
    `dreamcade data build --size` makes (OpenCV's INTER_AREA, frame by frame: its rounding is
    its own), so the small frames of a store at full size are those of a store built small
    from it. scale 1 returns `frames`."""
    if scale == 1:
        return frames
    import cv2

    lead, (c, h, w) = frames.shape[:-3], frames.shape[-3:]
    flat = frames.reshape(-1, c, h, w).permute(0, 2, 3, 1).cpu().numpy()
    size = (w // scale, h // scale)
    small = np.stack([cv2.resize(f, size, interpolation=cv2.INTER_AREA) for f in flat]) if len(flat) else \
        np.zeros((0, size[1], size[0], c), np.uint8)
    out = torch.from_numpy(small.reshape(len(flat), size[1], size[0], c)).permute(0, 3, 1, 2)
    return out.reshape(*lead, c, size[1], size[0]).to(frames.device)
