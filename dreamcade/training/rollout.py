"""Rollout training (train.rollout_steps = k): windows of L + k + 1 frames, where a share of them
(train.rollout_share) see the model's own predictions in the last k places of their context.

In play a world model only ever sees its own frames after the first L, and every error it makes
is in the context of the next step. Trained on recorded contexts alone, it has never been asked
to bring a slightly blurred or shifted frame back to the game, and on a view that moves (a
scrolling level, a turning camera) the errors compound into one blurred texture within a few
steps. Here the model predicts frames L, ..., L + k - 1 of the window one after another, each
from the L frames before it (recorded ones first, its own later), with the run's sampler as in
play and no gradient through them; the loss is then the usual one on the recorded frame L + k,
given a context whose last k frames are the model's own (DIAMOND's CS:GO model and Self-Forcing
train on their own rollouts in the same spirit)."""

from __future__ import annotations

import torch

from dreamcade.dataset.batch import Batch
from dreamcade.model.config import SamplerConfig
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.sampler import next_frame


@torch.no_grad()
def with_own_frames(model: Denoiser, batch: Batch, k: int, share: float, sampler: SamplerConfig,
                    speed: Speed = EAGER, generator: torch.Generator | None = None) -> Batch:
    """The last L + 1 steps of `batch`'s windows of L + k + 1, as float frames, where a random
    `share` of the windows have frames L .. L + k - 1 (counted from the window's start) replaced
    by the model's own predictions; a frame padded before its episode's start stays as it is."""
    L = model.context
    frames = batch.frames_float()
    if frames.shape[1] != L + k + 1:
        raise ValueError(f"rollout training needs windows of {L + k + 1} frames, got {frames.shape[1]}")
    rows = torch.rand(frames.shape[0], device=frames.device, generator=generator) < share
    if k > 0 and rows.any():
        own, acts, mask = frames[rows].clone(), batch.actions[rows], batch.mask[rows]
        was = model.training
        model.eval()
        for j in range(k):
            pred = next_frame(model, own[:, j:j + L], acts[:, j:j + L], mask[:, j:j + L], sampler, generator, speed)
            keep = mask[:, j + L, None, None, None]
            own[:, j + L] = torch.where(keep, pred, own[:, j + L])
        model.train(was)
        frames = frames.clone()
        frames[rows] = own
    return Batch(frames[:, k:], batch.actions[:, k:], batch.mask[:, k:])
