"""The typed batch that the Dataset yields and the model consumes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dreamcade.dataset.pixels import to_model


@dataclass
class Batch:
    """Windows of L+1 steps. `actions[:, i]` is the input held from `frames[:, i]` to
    `frames[:, i + 1]`, so frame L is predicted from frames[:, :L] and actions[:, :L].

    frames: uint8 [B, L+1, 3, H, W] (or float in [-1, 1] from `frames_float()`)
    actions: float32 [B, L+1, A]
    mask: bool [B, L+1], False where a step before the episode start was padded (the first
        frame repeated, the action zeroed)
    """

    frames: torch.Tensor
    actions: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return self.frames.shape[0]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(self.frames.to(device, non_blocking=non_blocking),
                     self.actions.to(device, non_blocking=non_blocking),
                     self.mask.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        return Batch(self.frames.pin_memory(), self.actions.pin_memory(), self.mask.pin_memory())

    def frames_float(self) -> torch.Tensor:
        """Frames as float32 in [-1, 1]."""
        if self.frames.dtype == torch.uint8:
            return to_model(self.frames)
        return self.frames.float()

    @staticmethod
    def stack(items: list[Batch]) -> Batch:
        return Batch(torch.stack([b.frames for b in items]), torch.stack([b.actions for b in items]),
                     torch.stack([b.mask for b in items]))


def collate(data: Batch | list[Batch]) -> Batch:
    """DataLoader collate: a batch fetched whole (WindowDataset.__getitems__) passes through."""
    return data if isinstance(data, Batch) else Batch.stack(data)
