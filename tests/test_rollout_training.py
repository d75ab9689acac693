"""Rollout training (train.rollout_steps): the model's own frames in its training context."""

import json

import pytest
import torch

from conftest import run_cli
from test_model import SPEC, make_model, randomize
from dreamcade.dataset.batch import Batch
from dreamcade.dataset.pixels import LEVEL
from dreamcade.model.config import SamplerConfig
from dreamcade.model.sampler import next_frame
from dreamcade.training.rollout import with_own_frames


def window_batch(b: int, n: int, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    frames = torch.randint(0, 256, (b, n, 3, 16, 16), generator=g, dtype=torch.uint8)
    actions = torch.zeros(b, n, 3)
    actions[..., :2] = torch.randint(0, 2, (b, n, 2), generator=g).float()
    return Batch(frames, actions, torch.ones(b, n, dtype=torch.bool))


def test_own_frames_replace_the_last_k_of_the_context_and_nothing_else():
    """Windows of L + k + 1 become windows of L + 1 whose last k context frames are the model's
    own, each predicted from the L frames before it (as play would), on 8-bit levels; the
    target stays the recorded frame; share 0 leaves every window recorded; a frame padded
    before its episode's start is never replaced."""
    model = randomize(make_model()).eval()
    L, k = model.context, 2
    sampler = SamplerConfig(steps=2, hold_levels=0)
    batch = window_batch(4, L + k + 1)
    recorded = batch.frames_float()
    out = with_own_frames(model, batch, k, 0.0, sampler)
    assert out.frames.shape[1] == L + 1 and torch.equal(out.frames, recorded[:, k:])
    assert torch.equal(out.actions, batch.actions[:, k:]) and torch.equal(out.mask, batch.mask[:, k:])

    g = torch.Generator().manual_seed(3)
    out = with_own_frames(model, batch, k, 1.0, sampler, generator=g)
    g = torch.Generator().manual_seed(3)
    torch.rand(4, generator=g)  # the draw of the rows
    own = recorded.clone()
    for j in range(k):
        own[:, L + j] = next_frame(model, own[:, j:j + L], batch.actions[:, j:j + L], batch.mask[:, j:j + L],
                                   sampler, g)
    assert torch.allclose(out.frames, own[:, k:], atol=1e-6)
    assert torch.equal(out.frames[:, -1], recorded[:, -1])  # the target is the recording's
    assert not torch.equal(out.frames[:, L - k:L], recorded[:, L:L + k])
    levels = (out.frames + 1) / LEVEL  # 0..255
    assert torch.allclose(levels, levels.round(), atol=1e-3)

    padded = Batch(batch.frames, batch.actions, batch.mask.clone())
    padded.mask[:, :L + 1] = False  # the first frames of the window lie before its episode's start
    out = with_own_frames(model, padded, k, 1.0, sampler)
    assert torch.equal(out.frames[:, L - k], recorded[:, L])  # frame L: padded, kept
    assert not torch.equal(out.frames[:, L - k + 1], recorded[:, L + 1])


def test_a_share_of_the_windows_is_rolled_out():
    model = randomize(make_model()).eval()
    L, k = model.context, 1
    sampler = SamplerConfig(steps=1, hold_levels=0)
    batch = window_batch(400, L + k + 1)
    out = with_own_frames(model, batch, k, 0.25, sampler, generator=torch.Generator().manual_seed(0))
    changed = (out.frames[:, L - 1] != batch.frames_float()[:, L]).flatten(1).any(1).float().mean().item()
    assert 0.19 < changed < 0.31, changed


@pytest.mark.slow
def test_a_run_with_rollout_training_trains_on_longer_windows_with_the_same_split(tmp_path, block_store):
    """train.rollout_steps=2: the training windows hold 2 frames more, the validation windows and
    the split are those of the run without it, and the run ends with its model and world."""
    out = {}
    for k in (0, 2):
        run_cli("-m", "dreamcade", "train", "--config", "configs/tiny.yaml", "--data", str(block_store),
                f"out_dir={tmp_path}", f"name=r{k}", "train.steps=6", "train.eval_every=6", "train.sample_every=6",
                "train.save_every=6", f"train.rollout_steps={k}", "--quiet", timeout=300)
        run = tmp_path / f"r{k}"
        assert (run / "world").is_dir() and (run / "samples").is_dir()
        out[k] = [json.loads(line) for line in (run / "stats.jsonl").read_text().splitlines()]
    val = [[r[key] for r in rows if key in r] for rows in out.values() for key in ["val/psnr_repeat_last"]]
    assert val[0] and val[0] == val[1]  # the same validation windows: the baseline's figure is the same
