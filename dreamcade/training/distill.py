"""Distil a trained world model into a student that makes each frame in fewer sampler steps.

`dreamcade distill --checkpoint runs/demo --steps 1 [--name demo-1step] [--iterations N]`

The student starts as a copy of the teacher and is trained on the teacher's training windows
with the teacher's context-noise augmentation (a level drawn in [0, diffusion.context_noise_max]
for each window, told to teacher and student alike), so it keeps the conditioning that keeps
long sessions healthy. Its loss carries the teacher's motion weight (diffusion.motion_weight),
so the few pixels that move count as much as they did in the teacher's training.

The student's `steps`-step sample from noise z is trained to equal the teacher's sample
(sampler.steps, its schedule and solver) from the same z, past frames and actions: the
trajectory's end point is regressed directly (Luhman & Luhman 2021, "Knowledge Distillation in
Iterative Generative Models"), with the gradient through every step of the student.
Consistency distillation (Song et al. 2023) was measured against it on the demo and not kept
(docs/distill.md has the table). With `--rollout N` the two go on together for N frames of a
session and every frame counts (distill_loss); `--init` starts the student from another student
of the same teacher, the way that loss is meant to be used.

It runs through the one training loop (dreamcade.training.loop) as a Task: checkpoints every
train.save_every iterations, `--resume`, several processes through accelerate. The result is a
run folder like train's: model/ (the student, with its sampler steps in its config and the
distillation in its metadata), config.yaml, checkpoints/, distill.json, stats.jsonl and world/;
play, eval, bench and export load it like any other run.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from dreamcade.dataset.batch import Batch
from dreamcade.dataset.pixels import quantize
from dreamcade.eval.metrics import mse, psnr_from_mse
from dreamcade.dataset.outputs import check_apart
from dreamcade.files.checkpoint import check_spec, load_model, model_home
from dreamcade.model.config import Config, ConfigError
from dreamcade.model.denoiser import EAGER, Denoiser, Speed
from dreamcade.model.device import configure
from dreamcade.model.runtime import Runtime
from dreamcade.model.sampler import conditioned, hold, next_frame, sample, schedule
from dreamcade.model.upsampler import STAGE, sampler_of
from dreamcade.training.loop import Task, train
from dreamcade.training.parts import build_data, prepare_run, run_output
from dreamcade.training.settings import DistillSettings


def student_config(teacher: Config, name: str, out_dir: str, settings: DistillSettings, runtime: Runtime) -> Config:
    """The teacher's config as the student's run: its name and folder, its sampler steps (in
    Euler's method: one network call a step, the point of a student; Heun's correction in few
    steps adds noise, docs/recipe.md#sampler-method; no guidance, and no diffusion.action_drop:
    it learns the teacher's guided frames, so its one call gives what the teacher's two did, and
    it never learns a frame without the keys to guide from), and the loop's settings of a distillation
    (iterations as train.steps, its batch, seed, learning rate after a 20-step warm-up, no EMA:
    the student is saved as trained, no periodic evaluation)."""
    cfg = copy.deepcopy(teacher)
    cfg.name, cfg.out_dir, cfg.sampler.steps, cfg.sampler.method = name, out_dir, settings.steps, "euler"
    cfg.sampler.guidance, cfg.sampler.guidance_rescale, cfg.diffusion.action_drop = 1.0, 0.0, 0.0
    t = cfg.train
    t.steps = settings.iterations or max(1, teacher.train.steps // 7)
    t.batch_size = settings.batch_size or teacher.train.batch_size
    t.seed, t.grad_accum, t.log_every, t.eval_every, t.sample_every = settings.seed, 1, 10, 0, 0
    t.device, t.threads, t.compile = runtime.device, runtime.threads, False
    cfg.optim.lr, cfg.optim.warmup_steps, cfg.optim.ema_decay = settings.lr, 20, 0.0
    cfg.check()
    return cfg


def distill_loss(teacher: Denoiser, student: Denoiser, batch: Batch, teacher_sampler, student_sampler,
                 generator: torch.Generator | None = None, speed: Speed = EAGER, rollout: int = 1) -> torch.Tensor:
    """Mean squared difference (motion-weighted as the teacher was trained) between the
    student's sample and the teacher's from the same noise, past frames and actions.

    With `rollout` above 1 each goes on for that many frames, as in a session: the student's
    frames are fed back to the student and the teacher's to the teacher (8-bit levels and the
    sampler's hold, as in play; no gradient through the past), each step from the same noise and
    the same context-noise level, the keys the window's own and then its last held; the loss is
    the mean over the steps of the squared difference between the two frames (after the first
    step, weighted by the teacher's own change). A student trained on the next frame alone makes
    a little less of each change than its teacher, and its world slows to a stop; along the
    teacher's session it keeps moving
    (docs/recipe.md#a-student-that-stands-still)."""
    frames = batch.frames_float()
    L, dev = teacher.context, frames.device
    context, ctx_sigma = teacher.noisy_context(frames[:, :L], generator)
    clean = [frames[:, :L], frames[:, :L]]  # the teacher's past, the student's
    total = frames.new_zeros(())
    for k in range(rollout):
        actions = batch.actions[:, torch.arange(k, k + L, device=dev).clamp(max=batch.actions.shape[1] - 1)]
        mask = torch.cat([batch.mask[:, k:L], batch.mask.new_ones(len(batch), min(k, L))], dim=1)
        if k == 0:
            contexts = [context, context]
        else:  # the same level on each side, one draw of its noise for both
            noise = torch.randn(clean[0].shape, device=dev, generator=generator) * ctx_sigma[:, None, None, None, None]
            contexts = [c + noise for c in clean]
        noise = torch.randn(frames[:, L].shape, device=dev, generator=generator)
        with torch.no_grad():
            target = sample(conditioned(teacher, contexts[0], ctx_sigma, actions, mask, teacher_sampler.guidance, speed,
                                        teacher_sampler.guidance_rescale),
                            noise, schedule(teacher_sampler, dev), teacher_sampler.method)
        out = sample(conditioned(student, contexts[1], ctx_sigma, actions, mask, student_sampler.guidance, speed,
                                 student_sampler.guidance_rescale), noise, schedule(student_sampler, dev),
                     student_sampler.method)
        bases = [teacher.base(c) for c in contexts]  # residual space: the frame is base + x
        err = (out - target + (bases[1] - bases[0])) ** 2  # the bases are one at the first step
        made = [hold(quantize((b + x.detach()).clamp(-1, 1)), c[:, -1], sampler.hold_levels)
                for b, x, c, sampler in zip(bases, (target, out), clean, (teacher_sampler, student_sampler))]
        if teacher.diffusion.motion_weight > 0:
            last, nxt = (frames[:, L - 1], frames[:, L]) if k == 0 else (clean[0][:, -1], made[0])
            err = err * teacher.motion_weights(last, nxt)
        total = total + err.mean()
        clean = [torch.cat([c[:, 1:], m[:, None]], dim=1) for c, m in zip(clean, made)]
    return total / rollout


@torch.no_grad()
def held_out_psnr(ds, predict, device: torch.device, windows: int = 256) -> float:
    """PSNR (dB, pooled) of predict(past frames, actions, mask) against the real next frames, on
    up to `windows` evenly spread windows of `ds`; frames in [-1, 1]."""
    idx = torch.linspace(0, len(ds) - 1, min(len(ds), windows)).long().tolist()
    errors = []
    for i in range(0, len(idx), 64):
        batch = ds.__getitems__(idx[i:i + 64]).to(device)
        frames = batch.frames_float()
        gen = predict(frames[:, :-1], batch.actions[:, :-1], batch.mask[:, :-1])
        errors.append(mse(gen, frames[:, -1]).cpu())
    return float(psnr_from_mse(torch.cat(errors).mean()))


def sampled(model: Denoiser, sampler, seed: int, speed: Speed = EAGER):
    """predict() for held_out_psnr: the model's next frame in its sampler's steps."""
    g = torch.Generator(next(model.parameters()).device).manual_seed(seed)
    return lambda context, actions, mask: next_frame(model, context, actions, mask, sampler, g, speed)


def distill(checkpoint: str | Path, settings: DistillSettings, name: str, out_dir: str = "runs",
            runtime: Runtime = Runtime(), progress: bool = True, resume: bool = False) -> Path:
    """Train and write the student's run folder through the training loop (checkpoints, resume
    with `resume`); returns it."""
    teacher, tcfg, meta = load_model(checkpoint)
    settings.check(tcfg.sampler.steps)
    if settings.rollout > 1 and not settings.init:
        print(f"note: --rollout {settings.rollout} starts from the teacher's own weights; a world made this way "
              "moved less than one trained along the session from a plain student: distill that first and pass "
              "it as --init (docs/distill.md#along-the-teachers-session---rollout---init)", file=sys.stderr)
    start = starting_point(settings.init, teacher) if settings.init else None
    cfg = student_config(tcfg, name, out_dir, settings, runtime)
    check_apart(cfg.run_dir, [model_home(checkpoint)], "--name/--out-dir")  # never into the teacher
    with run_output(cfg):  # checked and locked: a second distillation of this name is refused
        resume_from = prepare_run(cfg, resume, "--name <new name>")
        train_ds, val_ds = build_data(tcfg)
        check_spec(teacher.spec, train_ds.spec, checkpoint)
        record = {"teacher": str(checkpoint), "teacher_step": int(meta.get("step", 0)),
                  "teacher_steps": tcfg.sampler.steps, "teacher_method": tcfg.sampler.method,
                  "teacher_guidance": tcfg.sampler.guidance,
                  "teacher_guidance_rescale": tcfg.sampler.guidance_rescale, "method": "trajectory",
                  **asdict(settings),
                  "iterations": cfg.train.steps, "batch_size": cfg.train.batch_size}
        started = time.time()
        print(f"{name}: distilling {checkpoint} ({tcfg.sampler.steps} steps) into {settings.steps} step(s), "
              f"{cfg.train.steps} iterations of {cfg.train.batch_size} windows", file=sys.stderr)

        def task(cfg: Config, data, device: torch.device) -> Task:
            frozen, speed = configure(teacher, device, tcfg.train.precision, tcfg.train.channels_last)
            frozen.eval().requires_grad_(False)
            student = copy.deepcopy(frozen).train().requires_grad_(True)
            if start is not None:
                student.load_state_dict(start)
            student.register_to_config(action_drop=0.0)  # as student_config: guidance is refused on it
            student.diffusion = replace(student.diffusion, action_drop=0.0)

            def finish(saved: Denoiser, step: int, log) -> dict[str, str]:
                record["minutes"] = round((time.time() - started) / 60, 2)  # of this process's part
                if val_ds is not None:
                    seed = settings.seed
                    figures = {"val/psnr": held_out_psnr(val_ds, sampled(saved, cfg.sampler, seed, speed), device),
                               "val/psnr_teacher": held_out_psnr(val_ds, sampled(frozen, tcfg.sampler, seed, speed),
                                                                 device),
                               "val/psnr_repeat_last": held_out_psnr(val_ds, lambda c, a, m: c[:, -1], device)}
                    log(step, figures)
                    record.update(val_psnr=figures["val/psnr"], val_psnr_teacher=figures["val/psnr_teacher"])
                    print(f"one-step PSNR on {min(len(val_ds), 256)} held-out windows: student "
                          f"{figures['val/psnr']:.2f} dB, teacher {figures['val/psnr_teacher']:.2f} dB", file=sys.stderr)
                (cfg.run_dir / "distill.json").write_text(json.dumps(record, indent=1) + "\n")
                return {"distilled": json.dumps(record)}

            loss = lambda batch: distill_loss(frozen, student, batch, tcfg.sampler, cfg.sampler, speed=speed,
                                              rollout=settings.rollout)
            return Task(student, loss, speed, "distill", finish, int(meta.get("step", 0)), figures=False)

        first = lambda c, data, dev: replace(task(c, data, dev), world=tcfg.upsampler.scale == 1)
        code = train(cfg, train_ds, val_ds, resume_from, progress, first)
        if code:
            raise ConfigError(f"the distillation stopped (exit {code}); lower --lr")
        if tcfg.upsampler.scale > 1:
            second_stage(checkpoint, tcfg, cfg, settings, progress, resume)
    return cfg.run_dir


def starting_point(init: str, teacher: Denoiser) -> dict[str, torch.Tensor]:
    """The weights of the model at `init` (--init: a student of the same teacher to train on
    from), checked to fit the teacher's network; ConfigError names the option and the fix."""
    model, _, _ = load_model(init)
    theirs, ours = model.state_dict(), teacher.state_dict()
    misfit = sorted(k for k in ours.keys() | theirs.keys()
                    if k not in theirs or k not in ours or theirs[k].shape != ours[k].shape)
    if misfit:
        raise ConfigError(f"--init {init}: its network is not the teacher's ({len(misfit)} weights differ, first "
                          f"{misfit[0]}); pass a student distilled from this teacher")
    return theirs


def upsampler_distill_loss(teacher, student, frames: torch.Tensor, crop: int, teacher_sampler, student_sampler,
                           generator: torch.Generator | None = None, speed: Speed = EAGER) -> torch.Tensor:
    """The upsampler's trajectory distillation: mean squared difference between the student's
    sample and the teacher's from the same noise, on the same random crops of full-size frames
    [B, 3, H, W] (model.upsampler.Upsampler.crops: base and level alike for both)."""
    base, _, level, _ = teacher.crops(frames, crop, generator)
    noise = torch.randn(base.shape, device=base.device, generator=generator)
    with torch.no_grad():
        target = sample(lambda x, s: teacher(x, s, base, level, speed), noise, schedule(teacher_sampler, base.device),
                        teacher_sampler.method)
    out = sample(lambda x, s: student(x, s, base, level, speed), noise, schedule(student_sampler, base.device),
                 student_sampler.method)
    return ((out - target) ** 2).mean()


def second_stage(checkpoint: str | Path, tcfg: Config, cfg: Config, settings: DistillSettings, progress: bool,
                 resume: bool) -> None:
    """A two-stage teacher's upsampler, as the student's second stage (<student>/upsampler/): a
    student of it in settings.steps Euler steps when the teacher's draws in more (through the
    loop, as the first stage: its own checkpoints and --resume), else the teacher's own; then
    the student's world is written with both."""
    from dreamcade.files.checkpoint import latest_checkpoint, load_upsampler, save_model
    from dreamcade.files.world import upsampler_folder
    from dreamcade.training.parts import write_world
    from dreamcade.training.upsampling import measure, stage_config

    teacher, up_cfg, meta = load_upsampler(upsampler_folder(checkpoint, tcfg))
    u = up_cfg.upsampler
    taken = None  # an upsampler taken as it is: (model, config, meta, whose)
    if settings.init:  # train on from a student: its upsampler
        taken = (*load_upsampler(upsampler_folder(settings.init, tcfg)), f"{settings.init}'s")  # a two-stage run's
        if taken[1].upsampler.scale != u.scale:
            raise ConfigError(f"--init {settings.init}: its upsampler widens x{taken[1].upsampler.scale}, the "
                              f"teacher's x{u.scale}; pass a student distilled from this teacher")
    elif u.sampler_steps <= settings.steps:
        taken = (teacher, up_cfg, meta, "the teacher's")
    if taken is not None:
        model, model_cfg, model_meta, whose = taken
        save_model(cfg.run_dir / STAGE, model, model_cfg, int(model_meta["step"]))
        print(f"its upsampler is {whose} ({model_cfg.upsampler.sampler_steps} {model_cfg.upsampler.method} "
              "step(s))", file=sys.stderr)
        write_world(cfg.run_dir)
        return
    scfg = stage_config(cfg)
    scfg.upsampler.sampler_steps, scfg.upsampler.method = settings.steps, "euler"
    scfg.train.steps = settings.iterations or max(1, u.steps // 7)
    scfg.train.batch_size = settings.batch_size or u.batch_size
    tsampler, ssampler = sampler_of(up_cfg), sampler_of(scfg)
    up_train, up_val = build_data(scfg, scale=1)
    print(f"distilling its upsampler ({u.sampler_steps} {u.method} steps) into {settings.steps} step(s), "
          f"{scfg.train.steps} iterations of {scfg.train.batch_size} crops", file=sys.stderr)

    def task(c: Config, data, device: torch.device) -> Task:
        frozen, speed = configure(teacher, device, tcfg.train.precision, tcfg.train.channels_last)
        frozen.eval().requires_grad_(False)
        student = copy.deepcopy(frozen).train().requires_grad_(True)

        def finish(saved, step: int, log) -> dict[str, str]:
            if up_val is not None:
                figures = measure(saved, up_val, scfg, device, Speed(speed.autocast))
                log(step, {f"{STAGE}/{k}": v for k, v in figures.items()})
                print(f"its upsampler in {settings.steps} step(s): {figures['psnr']:.2f} dB on held-out frames "
                      f"(bicubic {figures['psnr_bicubic']:.2f} dB)", file=sys.stderr)
            return {}

        loss = lambda batch: upsampler_distill_loss(frozen, student, batch.frames[:, -1], u.crop, tsampler, ssampler,
                                                    speed=speed)
        return Task(student, loss, speed, "distill", finish, int(meta["step"]), figures=False, world=False)

    resume_from = prepare_run(scfg, resume and latest_checkpoint(scfg.run_dir) is not None, "--name <new name>")
    if train(scfg, up_train, up_val, resume_from, progress, task):
        raise ConfigError("the upsampler's distillation stopped; lower --lr")
    write_world(cfg.run_dir)
