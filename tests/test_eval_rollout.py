"""Rollouts through the real WorldModelEnv with stand-in predictors (a "perfect" model that
returns the recorded next frame, and one that repeats its input), the action classifier on the
block game, and the reference-free section on a session."""

import numpy as np
import pytest
import torch

from dreamcade.dataset import Control, ControlSpec
from dreamcade.eval.data import SessionSequence, open_eval_data, rollout_cases, sample_transitions, sample_windows
from dreamcade.eval.drift import DriftSettings, build_reference, rollouts, sessions, teacher_forced
from dreamcade.eval.idm import train_idm
from dreamcade.eval.metrics import PSNR_CAP, psnr
from dreamcade.eval.rollout import MeanFrame, RepeatLast
from dreamcade.eval.summary import crossings, first_below, per_step, rollout_summary
from dreamcade.model.config import SamplerConfig

L = 2
CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def settings():
    return DriftSettings(horizon=20, episodes=3, chunks=4, windows=128, bank=500, idm_steps=600, progress=False)


@pytest.fixture(scope="module")
def data(block_store):
    return open_eval_data([str(block_store)], L, 0.2)


@pytest.fixture(scope="module")
def ref(data, settings):
    torch.manual_seed(0)
    return build_reference(data, settings, CPU)


class Replay:
    """Stand-in "perfect" model: each call returns the recorded next frame of every row's episode
    (rows in the order of the cases), whatever it is given."""

    def __init__(self, spec: ControlSpec, episodes: list[np.ndarray]) -> None:
        self.spec, self.context, self.t = spec, L, 0
        self.frames = torch.from_numpy(np.stack(episodes)).permute(0, 1, 4, 2, 3).float() / 127.5 - 1

    def next_frame(self, context, actions, mask, sampler, generator=None):
        out = self.frames[:, self.context + self.t].clone()
        self.t += 1
        return out


def chw(frames):
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)


@pytest.mark.slow
def test_a_perfect_model_scores_the_cap_at_every_step(data, ref, settings):
    cases = rollout_cases(data, L, settings.horizon, settings.episodes)
    assert len(cases) == 3 and all(c.reference_steps == 20 for c in cases)
    model = Replay(data.spec, [np.concatenate([c.context, c.real]) for c in cases])
    r = rollouts(model, cases, SamplerConfig(), ref, settings, CPU)
    assert r.psnr.shape == (3, 20)
    assert np.all(r.psnr == PSNR_CAP), "identical frames at every step"
    assert np.allclose(r.ssim, 1.0, atol=1e-6)
    for g, c in zip(r.generated, cases):
        assert np.array_equal(g, c.real)
    # every reference-free figure equals the recording's own
    for h, rh in zip(r.health, r.real_health):
        for k in ("sharpness", "colour_distance", "nearest"):
            assert np.array_equal(getattr(h, k), getattr(rh, k))
    assert [d["score"] for d in r.drift] == [d["score"] for d in r.real_drift]
    assert np.array_equal(r.action, r.real_action)
    s = rollout_summary(r, settings, ref)
    assert [c["curve_step"] for c in s["psnr"]["crossings"]] == [None, None, None]
    assert s["psnr"]["pooled"] == PSNR_CAP and s["psnr_below_frozen_frame_from_step"] is None


def test_a_model_that_repeats_its_input_degrades_as_expected(data, ref, settings):
    """Horizon 120, past the end of every episode (71 to 101 frames): PSNR exists while the
    recording lasts, and equals that of the frozen last context frame against each real frame."""
    long = DriftSettings(**{**vars(settings), "horizon": 120})
    cases = rollout_cases(data, L, long.horizon, 4)
    r = rollouts(RepeatLast(data.spec, L), cases, SamplerConfig(), ref, long, CPU)
    assert r.psnr.shape == (4, 120)
    for i, c in enumerate(cases):
        R = c.reference_steps
        assert R == c.stop - c.start - L < 120
        expect = psnr(chw(np.repeat(c.context[-1:], R, 0)), chw(c.real)).numpy()
        assert np.allclose(r.psnr[i, :R], expect)
        assert np.all(np.isnan(r.psnr[i, R:])), "no ground truth past the recording"
        assert np.all(np.isfinite(r.health[i].sharpness)) and len(r.health[i]) == 120, "health runs on"
    assert np.allclose(np.nan_to_num(r.psnr), np.nan_to_num(r.static_psnr)), "the model is the frozen frame"
    # one step of the 4x4 block (2 pixels) changes at most half the pixels that a block far
    # from where it was changes: the error at step 1 is at most about half the later one
    mse = 10.0 ** (-r.psnr / 10)
    early, late = np.nanmean(mse[:, 0]), np.nanmean(mse[:, 10:60])
    assert early < 0.75 * late, f"mean squared error {early:.5f} at step 1, {late:.5f} at steps 11-60"
    s = rollout_summary(r, long, ref)
    assert s["reference_steps"] == {"min": min(c.reference_steps for c in cases), "max": max(c.reference_steps for c in cases)}
    assert s["psnr"]["per_step"]["n"][-1] == 0 and s["psnr"]["per_step"]["mean"][-1] is None
    assert len(s["health"]["drift_score"]["per_chunk_mean"]) == 4
    # steps 1, 10, 100 read off the pooled curves (the mean squared error over the episodes that
    # still have a recording there: none at step 100), the model's and the frozen frame's alike
    at = s["psnr_at_steps"]
    assert at["steps"] == [1, 10, 100] and "bicubic" not in at and at["model"] == at["frozen_frame"]
    assert at["model"][2] is None and not np.isfinite(r.psnr[:, 99]).any()
    for k, step in enumerate(at["steps"][:2]):
        ok = np.isfinite(r.psnr[:, step - 1])
        assert ok.all() and at["model"][k] == pytest.approx(-10 * np.log10(mse[:, step - 1].mean()), abs=1e-4)


def test_thresholds_and_per_step_statistics():
    v = np.array([[40.0, 31.0, 29.0, 24.0], [35.0, 20.0, np.nan, np.nan]])
    assert first_below(v[0], 30) == 3 and first_below(v[1], 30) == 2 and first_below(v[1], 10) is None
    st = per_step(v)
    assert st["mean"] == [37.5, 25.5, 29.0, 24.0] and st["n"] == [2, 2, 1, 1]
    assert st["std"][0] == 2.5 and st["min"][1] == 20.0 and st["max"][1] == 31.0
    c = crossings(v, [30.0, 25.0])
    assert c[0] == {"threshold": 30.0, "curve_step": 2, "episodes": [3, 2], "episodes_below": 2}
    assert c[1]["curve_step"] == 4 and c[1]["episodes"] == [4, 2]


def test_teacher_forced_baselines_match_a_direct_computation(data, ref, settings):
    preds = {"model": RepeatLast(data.spec, L), "mean_frame": MeanFrame(data.spec, L, ref.mean_frame)}
    one = teacher_forced(preds, data, SamplerConfig(), settings, CPU)
    batch = next(sample_windows(data.heldout, settings.windows))
    direct = psnr(batch.frames[:, L - 1], batch.frames[:, L]).numpy()
    assert np.allclose(one.scores["model"]["psnr"], direct)
    mean = torch.from_numpy(ref.mean_frame).permute(2, 0, 1)[None].expand_as(batch.frames[:, L])
    assert np.allclose(one.scores["mean_frame"]["psnr"], psnr(mean, batch.frames[:, L]).numpy())
    summary = one.summary()
    assert summary["model"]["psnr"]["n"] == len(direct) == 128
    assert summary["model"]["psnr_pooled"] < summary["model"]["psnr"]["mean"], "capped frames inflate the mean"


@pytest.mark.slow
def test_the_action_classifier_reads_the_block_game_and_not_shuffled_actions(data, ref, settings):
    """Held-out accuracy at least 0.75 and 0.35 above chance with the real actions (0.85 to 0.9
    is typical: the block hides its move at a wall, and which episodes are held out varies with
    the recording's creation time). With the actions shuffled (training and held-out alike, so
    that no frame says anything about its label), at most chance + 0.05: the most common action's
    share, which an honest classifier cannot beat."""
    idm = ref.idm
    assert idm.n_heldout > 500 and idm.ceiling >= 0.75, idm.summary()
    assert idm.ceiling > idm.chance + 0.35, idm.summary()
    rng = np.random.default_rng(0)
    shuffle = lambda t: (t[0], t[1], t[2][rng.permutation(len(t[2]))])
    bad = train_idm(shuffle(sample_transitions(data.train, settings.idm_pairs)),
                    shuffle(sample_transitions(data.heldout_pairs, settings.idm_pairs)), data.spec,
                    steps=settings.idm_steps, seed=0)
    assert bad.chance == pytest.approx(idm.chance), "shuffling keeps how often each action occurs"
    assert bad.ceiling <= bad.chance + 0.05, bad.summary()
    assert idm.unmeasured is None and "better than chance" in bad.unmeasured, "no figure from a blind classifier"


def test_sessions_get_health_and_action_following(data, ref, settings, block_store):
    """Real frames given as a session score like real frames; a session of another control
    spec gets health but no action following, with a note."""
    before, after, actions = sample_transitions(data.heldout_pairs, 60)
    frames = np.concatenate([before[:1], after[:59]])
    real = SessionSequence(str(block_store), 0, 0, frames, actions, data.spec)
    other = SessionSequence("other.zarr", 0, 0, frames, np.zeros((60, 1), np.float32),
                            ControlSpec((Control("jump"),)))
    a, b = sessions([real, other], ref, settings)
    assert len(a.health) == 60 and a.action is not None and len(a.action) == 59
    assert a.note is None and b.action is None and "control spec differs" in b.note
    assert np.array_equal(a.health.sharpness, b.health.sharpness)
    assert len(a.drift["score"]) == 12 and a.drift["score"][0] == 0.0  # chunks of ceil(20 / 4) frames
