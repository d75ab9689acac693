"""The drift evaluation of one model on one data set: teacher-forced one-step quality,
open-loop rollouts from real context with the recorded actions (quality against the recording,
health, action following), and the reference-free section for saved sessions.

Steps are counted from 1: step t is the t-th generated frame after the real context. The
settings (eval.settings.DriftSettings) and the records filled here (eval.results) can be
imported from this module too.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

from dreamcade.eval.data import EvalData, RolloutCase, SessionSequence, sample_frames, sample_transitions, sample_windows
from dreamcade.eval.health import HealthBand, HealthReference, colour_distance, drift_score, frame_health
from dreamcade.eval.idm import ActionLabels, IdmResult, correct, per_key, readings, split_by_time, train_idm
from dreamcade.eval.metrics import mse, psnr, psnr_from_mse, ssim
from dreamcade.eval.results import Reference, Rollouts, SessionResult
from dreamcade.dataset.pixels import model_to_hwc
from dreamcade.eval.rollout import MeanFrame, RepeatLast, one_step
from dreamcade.eval.settings import DriftSettings
from dreamcade.eval.summary import num, pad, stats
from dreamcade.model.config import SamplerConfig
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.upsampler import Bicubic
from dreamcade.model.world_env import Predictor, WorldModelEnv


def _chw(frames: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, 3] -> uint8 [N, 3, H, W]."""
    return torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)


# -- what every evaluation of one data set shares ----------------------------------------------------

def build_reference(data: EvalData, settings: DriftSettings, device: torch.device | str) -> Reference:
    """Sample the bank and real held-out frames, and train the action classifier."""
    bank = sample_frames(data.train, settings.bank)
    health = HealthReference.build(bank, sample_frames(data.heldout, min(settings.bank, 1000)))
    notes = list(data.notes)
    idm = None
    train = check = None
    if ActionLabels(data.spec).n_out:
        train = sample_transitions(data.train, settings.idm_pairs)
        if data.split == "val":
            check = sample_transitions(data.heldout_pairs, settings.idm_pairs)
        else:  # nothing held out: check on the last fifth of the transitions, kept from training
            train, check = split_by_time(train)
    if train is None:
        notes.append("the control spec has no binary control: action following is not scored")
    elif ActionLabels.for_data(data.spec, train[2]).n_out == 0:
        notes.append("no binary control is both held and not held in the training data: action following is "
                     "not scored")
    else:
        idm = train_idm(train, check, data.spec, steps=settings.idm_steps, device=device, seed=settings.seed,
                        progress=settings.progress, desc=f"action classifier (--idm-steps {settings.idm_steps})")
        if settings.progress:
            print(f"action classifier: {settings.idm_steps} steps in {idm.seconds:.0f} s "
                  f"(--idm-steps sets how many)", file=sys.stderr)
        if idm.unmeasured:
            notes.append(f"action following is unmeasured: {idm.unmeasured}")
    band = real_band(data, health, settings)
    if (n := band.windows - band.left_out) < BAND_WINDOWS:
        held = "held-out " if data.split == "val" else ""
        notes.append(f"the healthy band rests on {n} window{'s' * (n != 1)} of real {held}frames (fewer than "
                     f"{BAND_WINDOWS}; --health-window {settings.health_window}), so its edges are those of a few "
                     "windows and a world as healthy as the game can leave it: evaluate on a longer recording "
                     "(--data; a world folder holds only a few short starts of one)")
    return Reference(data, health, idm, bank.mean(0).round().astype(np.uint8), band, notes)


BAND_WINDOWS = 8
"""Fewer gameplay windows of real held-out frames than this, and eval says its healthy band is thin."""


def real_band(data: EvalData, health: HealthReference, settings: DriftSettings, episodes: int = 16,
              frames: int = 2000) -> HealthBand:
    """The healthy horizon's band, from the health of up to `episodes` held-out episodes (at most
    `frames` frames each) in windows of settings.health_window steps."""
    seqs = [data.heldout.episode_steps(i, frames)[0] for i in range(min(episodes, len(data.heldout.ep_len)))]
    return HealthBand.build([frame_health(f, health) for f in seqs], settings.health_window)


# -- teacher-forced one-step quality ---------------------------------------------------------------------

@dataclass
class OneStep:
    """Per-window PSNR (dB) and SSIM of each predictor's one-step prediction, and a few samples."""

    scores: dict[str, dict[str, np.ndarray]]
    samples: list[np.ndarray]
    """Three rows uint8 [n, H, W, 3]: the last real context frame, the model's prediction, the real next frame."""

    def summary(self) -> dict:
        """Per predictor: PSNR and SSIM statistics over windows, and the pooled PSNR (of the mean
        squared error over all windows, which a few identical frames cannot inflate)."""
        return {name: {"psnr": stats(s["psnr"]), "ssim": stats(s["ssim"]),
                       "psnr_pooled": num(psnr_from_mse(torch.tensor(s["mse"].mean())))}
                for name, s in self.scores.items()}


def teacher_forced(predictors: dict[str, Denoiser | Predictor], data: EvalData, sampler: SamplerConfig,
                   settings: DriftSettings, device: torch.device | str, speed: Speed = EAGER,
                   upsampling: dict | None = None) -> OneStep:
    """Predict the last frame of `settings.windows` held-out windows from their real past, with
    each predictor (the first is the model: its predictions become the samples); `upsampling`:
    the second stage of the predictors that have one, by name (eval.rollout.one_step)."""
    upsampling = upsampling or {}
    gens = {k: torch.Generator(device).manual_seed(settings.seed) for k in predictors}
    scores = {k: {"psnr": [], "ssim": [], "mse": []} for k in predictors}
    samples = []
    L = next(iter(predictors.values())).context
    for batch in tqdm(list(sample_windows(data.heldout, settings.windows, 64)), desc="one-step",
                      disable=not settings.progress, leave=False):
        real = batch.frames[:, -1]  # uint8 [B, 3, H, W]
        on_dev = batch.to(device)
        for name, p in predictors.items():
            out = _chw(one_step(p, on_dev, sampler, gens[name], speed, upsampling.get(name)).numpy())
            scores[name]["mse"].append(mse(out, real).numpy())
            scores[name]["psnr"].append(psnr(out, real).numpy())
            scores[name]["ssim"].append(ssim(out, real).numpy())
            if not samples:
                hwc = lambda x: x[:8].permute(0, 2, 3, 1).numpy()
                samples = [hwc(batch.frames[:, L - 1]), hwc(out), hwc(real)]
    return OneStep({k: {m: np.concatenate(v).astype(np.float64) for m, v in s.items()} for k, s in scores.items()},
                   samples)


# -- open-loop rollouts ------------------------------------------------------------------------------------

def generate(predictor: Denoiser | Predictor, cases: list[RolloutCase], sampler: SamplerConfig,
             settings: DriftSettings, device: torch.device | str, desc: str | None = "rollout",
             speed: Speed = EAGER, upsampling=None, steps: int | None = None
             ) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Roll every case out through WorldModelEnv, `settings.batch` episodes at a time: one
    uint8 [T, H, W, 3] array per case, T = the length of its actions (or `steps`, fewer). With
    `upsampling` (a two-stage world), also the same low frames widened bicubically
    (model.upsampler.Bicubic), the baseline its upsampler has to beat; else None."""
    out, wide = [], []
    for g, a in enumerate(range(0, len(cases), settings.batch)):
        group = cases[a:a + settings.batch]
        env = WorldModelEnv(predictor, sampler, device, seed=settings.seed + g, speed=speed, upsampling=upsampling)
        env.reset(np.stack([c.context for c in group]), np.stack([c.context_actions for c in group]))
        actions = np.stack([c.actions[:steps] for c in group])
        made, widened = [], []
        for t in tqdm(range(actions.shape[1]), desc=desc or "", disable=not (settings.progress and desc), leave=False):
            made.append(env.step(actions[:, t]).numpy())
            if upsampling is not None:
                widened.append(model_to_hwc(Bicubic(upsampling.scale)(env.low)).numpy())
        out.extend(np.stack(made, 1))
        wide.extend(np.stack(widened, 1) if widened else [])
    return out, (wide if upsampling is not None else None)


def quality(generated: list[np.ndarray], cases: list[RolloutCase], T: int | None = None
            ) -> tuple[np.ndarray, np.ndarray]:
    """PSNR (dB, capped) and SSIM of each generated frame against the recording: [B, T] each
    (T: the generated length, or more), NaN past the end of the recorded episode."""
    T = T or len(generated[0])
    p, s = np.full((len(cases), T), np.nan), np.full((len(cases), T), np.nan)
    for i, (g, c) in enumerate(zip(generated, cases)):
        for a in range(0, c.reference_steps, 256):
            b = min(a + 256, c.reference_steps)
            x, y = _chw(g[a:b]), _chw(c.real[a:b])
            p[i, a:b], s[i, a:b] = psnr(x, y).numpy(), ssim(x, y).numpy()
    return p, s


def action_curve(idm: IdmResult, first: np.ndarray, frames: np.ndarray,
                 actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Whether the classifier sees actions[t] in the transition into frames[t] ([T], from the
    frame `first` before frames[0]), and per scored control whether it reads it held and whether
    it was ([T, K] twice: idm.readings)."""
    before = np.concatenate([first[None], frames[:-1]])
    return readings(idm.model, idm.labels, before, frames, actions[:len(frames)])


def rollouts(model: Denoiser | Predictor, cases: list[RolloutCase], sampler: SamplerConfig, ref: Reference,
             settings: DriftSettings, device: torch.device | str, speed: Speed = EAGER, upsampling=None) -> Rollouts:
    """Roll out the model (and the frozen-frame baseline; with `upsampling`, the bicubic one too)
    and measure everything."""
    t0 = time.perf_counter()
    gen, wide = generate(model, cases, sampler, settings, device, speed=speed, upsampling=upsampling)
    fps = sum(map(len, gen)) / max(time.perf_counter() - t0, 1e-9)
    T = len(gen[0])
    # the frozen frame is only scored against the recording: it is made as far as that goes
    static, _ = generate(RepeatLast(model.spec, model.context), cases, sampler, settings, device, None,
                         steps=max(1, max(c.reference_steps for c in cases)))
    health = [frame_health(g, ref.health) for g in gen]
    real_health = [frame_health(c.real, ref.health) for c in cases]
    action = np.full((len(cases), T), np.nan)
    real_action = np.full((len(cases), T), np.nan)
    keys = None
    if ref.idm is not None:
        gen_keys, real_keys = [], []  # (seen, given) of each episode
        for i, (g, c) in enumerate(zip(gen, cases)):
            action[i], *seen_given = action_curve(ref.idm, c.context[-1], g, c.actions)
            gen_keys.append(seen_given)
            real, *seen_given = action_curve(ref.idm, c.context[-1], c.real, c.actions)
            real_action[i] = pad(real, T)
            real_keys.append(seen_given)
        stack = lambda pairs: [np.concatenate(x) for x in zip(*pairs)]
        keys = per_key(ref.idm.labels.keys, *stack(gen_keys), *stack(real_keys))
    return Rollouts(cases, gen, *quality(gen, cases), *quality(static, cases, T), health, real_health,
                    [drift_score(h, settings.chunk, ref.health) for h in health],
                    [drift_score(h, settings.chunk, ref.health) for h in real_health], action, real_action, fps,
                    *(quality(wide, cases) if wide is not None else (None, None)),
                    bicubic_colour=None if wide is None else np.stack([colour_distance(w, ref.health.levels)
                                                                       for w in wide]),
                    per_key=keys)


# -- sessions: the reference-free section only --------------------------------------------------------------

def sessions(seqs: list[SessionSequence], ref: Reference, settings: DriftSettings) -> list[SessionResult]:
    """Health, drift score and (when the session's control spec is the data's) action following."""
    out = []
    for s in tqdm(seqs, desc="sessions", disable=not settings.progress, leave=False):
        h = frame_health(s.frames, ref.health)
        action, note = None, None
        diff = s.spec.differences(ref.data.spec)
        if diff:
            note = f"{s.path}: control spec differs from the data's ({'; '.join(diff)}): action following skipped"
        elif ref.idm is not None and len(s.frames) > 1:
            action = correct(ref.idm.model, ref.idm.labels, s.frames[:-1], s.frames[1:], s.actions[:-1])
        out.append(SessionResult(s, h, drift_score(h, settings.chunk, ref.health), action, note))
    return out


# -- one model ----------------------------------------------------------------------------------------------

@dataclass
class ModelEval:
    """Everything measured on one model with one sampler setting."""

    one_step: OneStep
    rollouts: Rollouts


def evaluate_model(model: Denoiser | Predictor, sampler: SamplerConfig, ref: Reference, data: EvalData,
                   cases: list[RolloutCase], settings: DriftSettings, device: torch.device | str,
                   speed: Speed = EAGER, upsampling=None) -> ModelEval:
    """Teacher-forced figures on `data`'s held-out windows (model, repeat-last, mean frame; with
    `upsampling`, the second stage of a two-stage world, the model's own low frame widened
    bicubically too) and the rollouts of `cases`, for one model (`data` built with the model's
    context, at the size the world shows)."""
    predictors = {"model": model, "repeat_last": RepeatLast(model.spec, model.context),
                  "mean_frame": MeanFrame(model.spec, model.context, ref.mean_frame)}
    stages = {}
    if upsampling is not None:
        predictors["bicubic"] = model
        stages = {"model": upsampling, "bicubic": Bicubic(upsampling.scale)}
    return ModelEval(teacher_forced(predictors, data, sampler, settings, device, speed, stages),
                     rollouts(model, cases, sampler, ref, settings, device, speed, upsampling))
