"""Measure how a world model drifts over long sessions.

  dreamcade eval drift --checkpoint runs/<name> [--data STORE...] --out reports/<name>
  dreamcade eval drift --session SESSION.zarr... --data STORE... --out reports/<session>
  dreamcade eval sweep --checkpoint runs/a [runs/b ...] --context-noise 0,0.1,0.3 --steps 1,3 --out reports/sweep

Each writes a report folder: metrics.json (every figure, with the command and versions), PNG
plots, MP4 videos and index.html, which shows it all on one page.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from dreamcade.dataset import open_store
from dreamcade.dataset.controls import SpecError
from dreamcade.dataset.errors import boundary, plural
from dreamcade.dataset.outputs import check_apart
from dreamcade.dataset.store import store_exists
from dreamcade.eval import EvalError
from dreamcade.eval.settings import DriftSettings, add_options, floats, ints, names
from dreamcade.model import config as sampling  # the sampler settings and their rules
from dreamcade.model.runtime import Runtime

if TYPE_CHECKING:
    import torch

    from dreamcade.eval.data import EvalData
    from dreamcade.eval.sweep import SweepModel
    from dreamcade.model.config import Config, SamplerConfig
    from dreamcade.model.denoiser import Denoiser, Speed

SWEEP_DEFAULTS = {"horizon": 300, "episodes": 4}
"""Where sweep's options differ from DriftSettings' (drift's): every setting is a full rollout."""

SUBCOMMAND_HELP = {
    "drift": "teacher-forced one-step quality, open-loop rollouts against the recording, reference-free "
             "health and action following; or, with --session, the reference-free figures of saved sessions",
    "sweep": "the drift figures over context noise levels, sampler steps and methods, and checkpoints: "
             "one table, one plot",
    "video": "a clip (MP4 or GIF) of a store's frames: a saved play session, a recording",
}

DRIFT_EPILOG = """\
what is measured:
  one step     held-out windows predicted from real past frames: PSNR and SSIM, beside repeating
               the last frame and the mean training frame
  held out     the training run's own split: whole episodes, or from a single episode its last
               data.val_fraction of frames, held out by time; the report says which
  rollouts     the --episodes longest held-out episodes (or segments), started from their first L
               real frames and driven by their recorded actions for --horizon steps; PSNR and SSIM
               per step while the recording lasts (the episode's length caps them), and the step at which
               each falls below the thresholds; past the recording the episode's actions are
               replayed from its start and only the reference-free figures go on
  health       sharpness, colour distance to the data, distance to the nearest training frame,
               and a drift score per chunk (each chunk against the first); no ground truth needed
  actions      a small classifier trained here on real transitions reads which action each
               generated transition shows; its accuracy on real held-out transitions is the ceiling

sessions: a store passed with --session is taken as generated frames with no ground truth (a
saved play session, or any store written with dreamcade.dataset.StoreWriter): it gets the reference-free
figures only, against --data (or the checkpoint's training stores). With --session the model is
not run; --checkpoint then only names the reference data.
"""


def _common(p: argparse.ArgumentParser, **defaults) -> None:
    """The options drift and sweep share: the data, the report folder, the settings, the machine."""
    p.add_argument("--data", nargs="+", metavar="STORE",
                   help="recordings to evaluate on (default: the checkpoint's training stores, data.stores); "
                        "what is held out is the training run's own split (data.val_fraction)")
    p.add_argument("--out", required=True, help="report folder to write (e.g. reports/<name>)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing report folder (the old one stays until the new one is complete)")
    p.add_argument("--skip-damaged", action="store_true",
                   help="leave out episodes that touch a missing or damaged chunk, with a note that names "
                        "them (default: refuse damaged data)")
    add_options(p, **defaults)
    Runtime.add_options(p)


def parse_args(argv=None, prog: str = "dreamcade eval") -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="{drift,sweep,video}")
    d = sub.add_parser("drift", help=SUBCOMMAND_HELP["drift"], description=textwrap.fill(SUBCOMMAND_HELP["drift"], 92),
                       epilog=DRIFT_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--checkpoint", help="a run folder (runs/<name>) or a world folder")
    d.add_argument("--session", nargs="+", metavar="STORE", default=[],
                   help="saved sessions to measure without ground truth (see below)")
    d.add_argument("--steps", type=int, help="sampler steps per frame, 1 to 10 (default: the checkpoint's sampler.steps)")
    d.add_argument("--method",
                   help="sampler method: euler (one network call a step) or heun (two, but the last) "
                        "(default: the checkpoint's sampler.method)")
    d.add_argument("--upsampler-steps", type=int,
                   help="a two-stage world's upsampler: its sampler steps per frame (default: the world's "
                        "upsampler.sampler_steps)")
    d.add_argument("--context-noise", type=float,
                   help="noise level given to past frames when generating (default: the checkpoint's "
                        "sampler.context_noise; at most its diffusion.context_noise_max)")
    d.add_argument("--guidance", type=float,
                   help="guidance on the input, 1 (off) or more: two network calls a step; needs a model "
                        "trained with diffusion.action_drop (default: the checkpoint's sampler.guidance)")
    d.add_argument("--guidance-rescale", type=float,
                   help="with guidance: the share of each guided step scaled back to the spread of the frame "
                        "with the keys, 0 (off) to 1 (default: the checkpoint's sampler.guidance_rescale)")
    d.add_argument("--hold-levels", type=float,
                   help="a generated pixel within this many 8-bit levels of the frame before keeps its value "
                        "(default: the checkpoint's sampler.hold_levels; 0: off)")
    d.add_argument("--videos", type=int, default=8, help="MP4 videos written, one per episode (default: 8)")
    _common(d)
    s = sub.add_parser("sweep", help=SUBCOMMAND_HELP["sweep"], description=SUBCOMMAND_HELP["sweep"] + ". "
                       "Each setting is a full drift evaluation (without videos), reduced to one row.")
    s.add_argument("--checkpoint", nargs="+", required=True, metavar="RUN",
                   help="one or more run folders or model files (same control spec and frame size)")
    s.add_argument("--context-noise", type=floats, default=[0.0, 0.05, 0.1, 0.2], metavar="X,...",
                   help="context noise levels to try (default: 0,0.05,0.1,0.2)")
    s.add_argument("--steps", type=ints, default=[1, 3], metavar="N,...", help="sampler steps to try (default: 1,3)")
    s.add_argument("--method", type=names, default=None, metavar="M,...",
                   help="sampler methods to try, of euler and heun (default: each checkpoint's sampler.method)")
    _common(s, **SWEEP_DEFAULTS)
    v = sub.add_parser("video", help=SUBCOMMAND_HELP["video"], description=SUBCOMMAND_HELP["video"] + ".")
    v.add_argument("store", help="the store to render (e.g. sessions/play-....zarr)")
    v.add_argument("--out", required=True, help="the clip to write: a .mp4 (H.264) or a .gif")
    v.add_argument("--episode", type=int, default=None, metavar="N", help="only episode N (default: every episode, in order)")
    v.add_argument("--frames", type=int, default=None, help="at most this many frames (default: all)")
    v.add_argument("--scale", type=int, default=8, help="pixels per frame pixel, nearest neighbour (default: 8)")
    v.add_argument("--fps", type=float, default=None, help="frames per second (default: the store's)")
    v.add_argument("--overwrite", action="store_true", help="replace an existing clip (once the new one is complete)")
    args = p.parse_args(argv)
    args.data = getattr(args, "data", None) or []
    return args


def check_data(stores: list[str], model: Denoiser, cfg: Config, checkpoint: str) -> None:
    from dreamcade.files.frames import check_frames

    """Every store has the model's control spec and the frame size it was trained at."""
    for p in stores:
        s = open_store(p)
        try:
            s.spec.check_same(model.spec, f"the data {p}", f"the model {checkpoint}")
        except SpecError as e:
            raise EvalError(str(e)) from None
        check_frames(s, model, cfg, f"the model {checkpoint}")


def resolve_device(args: argparse.Namespace) -> torch.device:
    from dreamcade.model.device import resolve_device

    return resolve_device(args.device)


def load(path: str, args: argparse.Namespace):
    """The model of a run folder, world folder or model file on the device of the runtime options
    (dreamcade.files.inference.Loaded: with its second stage, when it has one); CheckpointError
    names it."""
    from dreamcade.files.inference import load_for_inference

    return load_for_inference(path, Runtime.from_args(args))


def missing_training_stores(stores: list[str], args: argparse.Namespace) -> None:
    """Without --data, the checkpoint's training stores must still be where training read them."""
    gone = [p for p in stores if not store_exists(p)]
    if gone and not args.data:
        raise EvalError(f"{gone[0]}: the checkpoint's training store is not there (moved, or trained on another "
                        "machine); pass the recordings with --data STORE...")


def check_sessions(paths: list[str], frame_shape: tuple) -> None:
    for p in paths:
        s = open_store(p)
        if s.frame_shape != frame_shape:
            raise EvalError(f"{p}: session frames are {s.width}x{s.height} but the data's are "
                            f"{frame_shape[1]}x{frame_shape[0]}; measure a session against data of its size (--data)")


@dataclass
class DriftInputs:
    """Everything `eval drift` reads, checked before any work starts."""

    data: EvalData
    model: Denoiser | None = None
    cfg: Config | None = None
    meta: dict | None = None
    speed: Speed | None = None
    upsampling: object | None = None
    """The second stage of a two-stage world (model.upsampler.Upsampling), else None."""
    sampler: SamplerConfig | None = None
    cases: list = field(default_factory=list)
    """Rollout starts (only when the model runs: no --session)."""
    seqs: list = field(default_factory=list)
    """Session episodes."""


def drift_inputs(args: argparse.Namespace, settings: DriftSettings, device: torch.device) -> DriftInputs:
    from dreamcade.eval.data import load_sessions, open_eval_data, rollout_cases
    from dreamcade.model.upsampler import upsampler_steps

    if not args.checkpoint and not args.session:
        raise EvalError("nothing to evaluate: pass --checkpoint runs/<name> (and optionally --data), or --session STORE...")
    if args.session and not args.checkpoint and not args.data:
        raise EvalError("--session needs reference data: pass --data STORE... (real recordings of the game), "
                        "or --checkpoint to use its training stores")
    if args.videos < 0:
        raise EvalError("--videos must be 0 or more")
    model, cfg, meta, _, speed, upsampling = load(args.checkpoint, args) if args.checkpoint else (None,) * 6
    stores = args.data or (cfg.data.stores if cfg else [])
    if not stores:
        raise EvalError(f"{args.checkpoint}: the checkpoint names no training stores; pass --data STORE...")
    missing_training_stores(stores, args)
    if model is not None:
        check_data(stores, model, cfg, args.checkpoint)
    run_model = model is not None and not args.session
    context = cfg.data.context if cfg else 1
    data = open_eval_data(stores, context, cfg.data.val_fraction if cfg else 0.1,
                          model.spec if model is not None else None, heldout=run_model,
                          skip_damaged=args.skip_damaged)
    inputs = DriftInputs(data, model, cfg, meta, speed, upsampler_steps(upsampling, args.upsampler_steps))
    if run_model:
        inputs.sampler = sampling.sampler_settings(cfg.sampler, steps=args.steps, context_noise=args.context_noise,
                                           hold_levels=args.hold_levels, method=args.method,
                                           guidance=args.guidance, guidance_rescale=args.guidance_rescale)
        sampling.check_guided(inputs.sampler.guidance, model.diffusion.action_drop, "--guidance")
        inputs.cases = rollout_cases(data, context, settings.horizon, settings.episodes)
    if args.session:
        check_sessions(args.session, data.frame_shape)
        inputs.seqs = load_sessions(args.session, settings.horizon)
    return inputs


def sampler_summary(sampler: SamplerConfig | None, cfg: Config | None, notes: list[str], upsampling=None) -> dict | None:
    """The sampler settings used, with the context noise level the model really applies, and a
    two-stage world's upsampler (its scale, sizes, steps and method)."""
    if sampler is None:
        return None
    used = sampling.context_noise_used(sampler.context_noise, cfg.diffusion.context_noise_max)
    if used != sampler.context_noise:
        notes.append(f"context noise {sampler.context_noise} is above the model's diffusion.context_noise_max "
                     f"({cfg.diffusion.context_noise_max}); it generated with {used}")
    out = {**vars(sampler), "context_noise_used": used}
    if upsampling is not None:
        (h, w), (lh, lw) = upsampling.model.frame_size, upsampling.model.low_size
        out["upsampler"] = {"scale": upsampling.scale, "size": f"{w}x{h}", "dynamics_size": f"{lw}x{lh}",
                            "steps": upsampling.sampler.steps, "method": upsampling.sampler.method}
    return out


def cmd_drift(args: argparse.Namespace) -> int:
    from dreamcade.eval.drift import build_reference, evaluate_model, sessions
    from dreamcade.eval.report import command_line, drift_metrics, provenance, report_output, write_drift_report

    settings = DriftSettings.from_args(args)
    device = resolve_device(args)
    out = Path(args.out)
    output = report_output(args.out, args.overwrite, args.data + args.session, [args.checkpoint])
    with output:
        tmp = output.path
        x = drift_inputs(args, settings, device)
        check_apart(output.target, x.data.stores)  # the checkpoint's training stores, known once it is loaded
        ref = build_reference(x.data, settings, device)
        ev = (evaluate_model(x.model, x.sampler, ref, x.data, x.cases, settings, device, x.speed, x.upsampling)
              if x.cases else None)
        sess = sessions(x.seqs, ref, settings) if x.seqs else []
        ck = {"path": args.checkpoint, "step": int(x.meta.get("step", -1))} if x.meta else None
        prov = provenance(command_line(args.argv), ck, x.data.stores, list(args.session), str(device), settings)
        m = drift_metrics(prov, ref, ev, sess, settings, sampler_summary(x.sampler, x.cfg, ref.notes, x.upsampling))
        write_drift_report(tmp, m, ev, sess, ref, settings, args.videos)
    print_drift(m, out)
    return 0


def print_drift(m: dict, out: Path) -> None:
    f = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"
    for n in m["notes"]:
        print(f"note: {n}", file=sys.stderr)
    if "one_step" in m:
        from dreamcade.eval.report import rollout_count

        o, held = m["one_step"], "held-out " if m["reference"]["held_out_by"] else ""
        print(f"held out: {m['reference']['held_out']}")
        print(f"one step ({o['windows']} {held}windows): PSNR {f(o['model']['psnr_pooled'])} dB pooled "
              f"(repeat last {f(o['repeat_last']['psnr_pooled'])}, mean frame {f(o['mean_frame']['psnr_pooled'])}), "
              f"SSIM {f(o['model']['ssim']['mean'], 3)}")
        r = m["rollouts"]
        hh = r["healthy_horizon"]
        print(f"healthy horizon: {hh['min']} steps (worst episode), {f(hh['median'], 0)} median, of {r['horizon']}")
        print(f"rollouts ({rollout_count(len(r['episodes']), m['reference'])}, {r['horizon']} steps): "
              f"PSNR {f(r['psnr']['pooled'])} dB pooled "
              f"(frozen frame {f(r['frozen_frame']['psnr']['pooled'])}), SSIM {f(r['ssim']['overall']['mean'], 3)}; "
              f"drift score, last chunk {f(r['health']['drift_score']['per_chunk_mean'][-1])}")
        at = r["psnr_at_steps"]
        if "bicubic" in at:
            series = lambda k: "/".join(f(x) for x in at[k])
            print(f"PSNR at steps {'/'.join(map(str, at['steps']))}, pooled: {series('model')} dB (the low frames "
                  f"widened bicubically {series('bicubic')}, frozen frame {series('frozen_frame')})")
            low = (r.get("bicubic") or {}).get("colour_distance")
            if low:
                ends = lambda c: f"{f(c[0], 3)}/{f(c[-1], 3)}"
                print(f"colour distance, first/last chunk: {ends(r['health']['colour_distance']['per_chunk_mean'])} "
                      f"(the low frames widened bicubically {ends(low['per_chunk_mean'])}; real "
                      f"{f(r['health']['colour_distance']['real_level'], 3)})")
        a = r.get("action_following")
        if a and a.get("unmeasured"):
            print(f"action following: unmeasured: {a['unmeasured']}")
        elif a:
            from dreamcade.files.world import scored_on

            read = scored_on(m["reference"].get("action_classifier"))
            print(f"action following: {f(a['accuracy'], 3)}{read} (real {held}ceiling {f(a['ceiling'], 3)}, "
                  f"chance {f(a['chance'], 3)}; from chance to the ceiling {f(a['from_chance'])})")
    if "sessions" in m:
        s = m["sessions"]
        print(f"sessions: healthy horizon {s['healthy_horizon']['min']} steps (worst), "
              f"{f(s['healthy_horizon']['median'], 0)} median")
        print(f"sessions ({len(s['sequences'])} sequences): drift score, last chunk "
              f"{f(s['health']['drift_score']['per_chunk_mean'][-1])}")
        a = s.get("action_following")
        if a:
            print("sessions: action following: " + (f"unmeasured: {a['unmeasured']}" if a.get("unmeasured") else
                                                    f"{f(a['accuracy'], 3)} (chance {f(a['chance'], 3)}; from chance "
                                                    f"to the ceiling {f(a['from_chance'])})"))
    print(f"report: {out / 'index.html'}")


def sweep_models(args: argparse.Namespace, settings: DriftSettings, device: torch.device) -> list[SweepModel]:
    from dreamcade.eval.data import open_eval_data, rollout_cases
    from dreamcade.eval.sweep import SweepModel

    loaded = [(p, *load(p, args)) for p in args.checkpoint]
    stores = args.data or loaded[0][2].data.stores
    if not stores:
        raise EvalError(f"{args.checkpoint[0]}: the checkpoint names no training stores; pass --data STORE...")
    missing_training_stores(stores, args)
    models = []
    for path, model, cfg, meta, _, speed, upsampling in loaded:
        check_data(stores, model, cfg, path)
        data = open_eval_data(stores, cfg.data.context, loaded[0][2].data.val_fraction, model.spec,
                              skip_damaged=args.skip_damaged)
        models.append(SweepModel(path, int(meta.get("step", -1)), model, cfg, data,
                                 rollout_cases(data, cfg.data.context, settings.horizon, settings.episodes), speed,
                                 upsampling))
    return models


def cmd_sweep(args: argparse.Namespace) -> int:
    from dreamcade.eval.drift import build_reference
    from dreamcade.eval.report import command_line, provenance, report_output, write_sweep_report
    from dreamcade.eval.sweep import best, format_table, run_sweep

    settings = DriftSettings.from_args(args)
    if not args.context_noise or not args.steps:
        raise EvalError("--context-noise and --steps each need at least one value")
    for n in args.steps:
        sampling.check_steps(n, "--steps")
    for level in args.context_noise:
        sampling.check_context_noise(level, "--context-noise")
    if args.method is not None and not args.method:
        raise EvalError("--method needs at least one value (euler, heun)")
    for method in args.method or []:
        sampling.check_method(method, "--method")
    device = resolve_device(args)
    out = Path(args.out)
    output = report_output(args.out, args.overwrite, args.data, list(args.checkpoint))
    with output:
        tmp = output.path
        models = sweep_models(args, settings, device)
        check_apart(output.target, models[0].data.stores)
        ref = build_reference(models[0].data, settings, device)
        if len({m.cfg.data.context for m in models}) > 1:
            ref.notes.append("the checkpoints have different contexts: each rolls out from its own first L frames")
        say = (lambda s: print(s, file=sys.stderr)) if settings.progress else (lambda s: None)
        rows, curves = run_sweep(models, args.context_noise, args.steps, ref, settings, device, say, args.method)
        prov = provenance(command_line(args.argv), [{"path": m.name, "step": m.step} for m in models], models[0].data.stores,
                          [], str(device), settings)
        m = {**prov, "checkpoint": None, "checkpoints": prov["checkpoint"], "notes": ref.notes,
             "reference": ref.summary(), "rows": rows, "curves": curves, "best": best(rows)}
        write_sweep_report(tmp, m)
    for n in m["notes"]:
        print(f"note: {n}", file=sys.stderr)
    print(format_table(rows))
    print(f"report: {out / 'index.html'}")
    return 0


def cmd_video(args: argparse.Namespace) -> int:
    from dreamcade.dataset import open_store
    from dreamcade.eval.video import CLIP_KINDS, clip_output, write_clip

    out = Path(args.out)
    if out.suffix.lower() not in CLIP_KINDS:
        raise EvalError(f"--out {out}: a clip is a .mp4 or a .gif")
    if args.scale < 1 or (args.fps is not None and not args.fps > 0) or (args.frames is not None and args.frames < 1):
        raise EvalError("--scale and --frames must be at least 1 and --fps positive")
    output = clip_output(args.out, args.overwrite, [args.store])
    try:
        s = open_store(args.store)
        s.damage_hint = "render an undamaged episode with --episode N"
        eps = s.episodes()
        if args.episode is not None:
            if not 0 <= args.episode < len(eps):
                raise EvalError(f"--episode {args.episode}: {args.store} has {plural(len(eps), 'episode')} "
                                f"(0 to {len(eps) - 1})")
            eps = [eps[args.episode]]
    except BaseException:
        output.abort()
        raise
    limit = args.frames or sum(len(e) for e in eps)

    def frames():  # chunk by chunk, so a long session never sits in memory whole (as MP4)
        left = limit
        for e in eps:
            for a in range(e.start, e.stop, 256):
                block = s.read_frames(a, min(e.stop, a + 256, a + left))
                yield from block
                left -= len(block)
                if left <= 0:
                    return
    with output:
        n = write_clip(output.path, frames(), args.fps or s.fps, args.scale)
        if n == 0:
            raise EvalError(f"{args.store}: no frames to render")
    print(f"wrote {out}: {n} frames at {args.fps or s.fps:g} frames/s")
    return 0


def main(argv=None, prog: str = "dreamcade eval") -> int:
    args = parse_args(argv, prog)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what the report says was typed
    Runtime.from_args(args).apply_threads()
    work = {"drift": cmd_drift, "sweep": cmd_sweep, "video": cmd_video}[args.command]
    return boundary(lambda: work(args), f"interrupted: no {'clip' if args.command == 'video' else 'report'} "
                    "written (what was at --out is as it was)")


if __name__ == "__main__":
    sys.exit(main())
