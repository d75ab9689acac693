"""`python -m bench.peer`: DIAMOND's Atari world model beside ours, on the same data, for the same
training time on the same cores, scored by the same report.

DIAMOND's code is not part of this project: PATH is a checkout of its public repository that you
fetched (`git clone https://github.com/eloialonso/diamond`), and its own modules are imported
from PATH/src: the denoiser and its loss (`Denoiser.forward`), its sigma distribution, optimizer
(`configure_opt`), warm-up (`get_lr_sched`) and sampler (`DiffusionSampler`), with the settings of
its Atari configuration (PATH/config). Only the batches come from here: a dreamcade store's
training windows (the split of our run, so neither model sees the held-out episodes) in
DIAMOND's batch format. Its modules import `omegaconf` (`pip install omegaconf`).

Stages (`--stage`, default all): `train` trains DIAMOND's denoiser for the wall-clock time our
run took (read from its stats.jsonl; `--seconds` to set it) with as many torch threads as our
run had, and writes OUT/diamond (safetensors weights, its settings); `eval` measures both models
with `dreamcade eval drift`'s own code (one-step PSNR, PSNR at steps 10 and 100, healthy horizon,
action following per chunk) on our run's held-out episodes, and each model's frames/s at batch 1
with 1 and 3 sampler steps; it writes OUT/report (a drift report per model and peer.json) and
prints the table. `speed` measures the frames/s again into that report (run it with nothing else
running).

`python -m bench.peer --diamond-src PATH --ours runs/NAME --out OUT [--stage train|eval|all|speed]
    [--seconds S] [--threads N] [--horizon 10000] [--episodes 4] [--steps 3]`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import yaml

from bench.common import machine, report
from dreamcade.dataset.batch import Batch
from dreamcade.dataset.controls import ControlSpec
from dreamcade.dataset.outputs import Output, OutputError
from dreamcade.dataset.store import open_store
from dreamcade.dataset.windows import WindowDataset, make_loader

CLONE = "git clone https://github.com/eloialonso/diamond"
WEIGHTS, SETTINGS = "diffusion_pytorch_model.safetensors", "diamond.json"


class PeerError(Exception):
    """Bad input: the message names the path, the field and the fix."""


# -- DIAMOND's code, from the user's checkout ------------------------------------------------------------

@dataclass
class Diamond:
    """DIAMOND's modules and its Atari settings, read from a checkout."""

    src: Path
    modules: dict
    denoiser: dict  # config/agent/default.yaml: denoiser
    training: dict  # config/trainer.yaml: denoiser.training
    optimizer: dict  # config/trainer.yaml: denoiser.optimizer
    sigma: dict  # config/trainer.yaml: denoiser.sigma_distribution
    sampler: dict  # config/trainer.yaml: world_model_env.diffusion_sampler

    def commit(self) -> str:
        proc = subprocess.run(["git", "-C", str(self.src), "rev-parse", "HEAD"], capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else "unknown (not a git checkout)"


def _plain(d: dict) -> dict:
    """A config section as hydra reads it, without its keys (_target_) and the values it would
    compute (${...}); numbers such as 1e-4, which YAML 1.1 reads as text, as numbers."""
    return {k: (_plain(v) if isinstance(v, dict) else _number(v)) for k, v in d.items()
            if not k.startswith("_") and not (isinstance(v, str) and v.startswith("${"))}


def _number(v):
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return v
    return v


def load_diamond(src: str | Path) -> Diamond:
    src = Path(src).expanduser().resolve()
    code = src / "src" / "models" / "diffusion" / "denoiser.py"
    if not code.is_file():
        raise PeerError(f"--diamond-src {src}: no DIAMOND checkout there ({code.relative_to(src)} is missing); "
                        f"get it with `{CLONE}` and pass that folder")
    try:
        agent = yaml.safe_load((src / "config" / "agent" / "default.yaml").read_text())
        trainer = yaml.safe_load((src / "config" / "trainer.yaml").read_text())
        sections = (agent["denoiser"], trainer["denoiser"]["training"], trainer["denoiser"]["optimizer"],
                    trainer["denoiser"]["sigma_distribution"], trainer["world_model_env"]["diffusion_sampler"])
    except (OSError, KeyError, TypeError, yaml.YAMLError) as e:
        raise PeerError(f"--diamond-src {src}: its config/agent/default.yaml and config/trainer.yaml do not read "
                        f"as DIAMOND's Atari settings ({type(e).__name__}: {e}); use a checkout of its main branch")
    sys.path.insert(0, str(src / "src"))
    try:
        import data as d_data
        import models.diffusion as d_diff
        import utils as d_utils
    except ModuleNotFoundError as e:
        raise PeerError(f"--diamond-src {src}: DIAMOND's modules need the package {e.name!r}; "
                        f"pip install {e.name}") from None
    finally:
        sys.path.remove(str(src / "src"))
    for mod in (d_data, d_diff, d_utils):  # not a module of the same name imported before from elsewhere
        if not Path(mod.__file__).resolve().is_relative_to(src / "src"):
            raise PeerError(f"--diamond-src {src}: the module {mod.__name__!r} was already loaded from "
                            f"{mod.__file__}; run bench.peer in a process of its own")
    modules = {"Batch": d_data.Batch, "configure_opt": d_utils.configure_opt, "get_lr_sched": d_utils.get_lr_sched,
               **{n: getattr(d_diff, n) for n in ("Denoiser", "DenoiserConfig", "InnerModelConfig",
                                                   "SigmaDistributionConfig", "DiffusionSampler",
                                                   "DiffusionSamplerConfig")}}
    return Diamond(src, modules, *map(_plain, sections))


def build_denoiser(dm: Diamond, num_actions: int, context: int) -> torch.nn.Module:
    """DIAMOND's Atari denoiser, for `num_actions` actions and `context` past frames."""
    m = dm.modules
    inner = {**dm.denoiser["inner_model"], "num_actions": num_actions}
    if inner["num_steps_conditioning"] != context:
        raise PeerError(f"our run has data.context {context} but DIAMOND's config "
                        f"(config/agent/default.yaml) conditions on {inner['num_steps_conditioning']} frames; "
                        f"train ours with data.context={inner['num_steps_conditioning']}")
    cfg = m["DenoiserConfig"](inner_model=m["InnerModelConfig"](**inner), sigma_data=dm.denoiser["sigma_data"],
                              sigma_offset_noise=dm.denoiser["sigma_offset_noise"])
    return m["Denoiser"](cfg)


def action_indices(actions: torch.Tensor) -> torch.Tensor:
    """Our one-hot actions [..., A] as DIAMOND's action indices [...] (a zeroed, padded step: 0)."""
    return actions.argmax(-1)


def check_spec(spec: ControlSpec, where: str) -> None:
    if not spec.exclusive or any(c.kind != "binary" for c in spec.controls):
        raise PeerError(f"{where}: its controls are not one action at a time (an Atari game's are); DIAMOND's "
                        "denoiser takes one discrete action per step. Compare on a store of `dreamcade record env`")


# -- our run ----------------------------------------------------------------------------------------------

@dataclass
class Ours:
    run: Path
    cfg: object
    seconds: float
    steps: int


def our_run(path: str | Path) -> Ours:
    from dreamcade.files.config_file import load_config

    run = Path(path)
    cfg_file, stats = run / "config.yaml", run / "stats.jsonl"
    if not cfg_file.is_file() or not stats.is_file():
        raise PeerError(f"--ours {run}: not a training run folder (config.yaml and stats.jsonl); pass runs/<name> "
                        "as `dreamcade train` wrote it")
    cfg = load_config(cfg_file)
    rows = [json.loads(line) for line in stats.read_text().splitlines() if line.strip()]
    timed = [(r["step"], r["time"]) for r in rows if "train/loss" in r and "time" in r]
    if len(timed) < 2:
        raise PeerError(f"{stats}: fewer than two training rows with a time; pass --seconds")
    (s0, t0), (s1, t1) = timed[0], timed[-1]
    seconds = (t1 - t0) * s1 / (s1 - s0)  # the first logged steps' time counted in at the same rate
    return Ours(run, cfg, seconds, s1)


# -- training ---------------------------------------------------------------------------------------------

def diamond_batch(dm: Diamond, b: Batch) -> object:
    """A dreamcade Batch (L+1 steps) in DIAMOND's format: obs float in [-1, 1], act indices."""
    n = b.frames.shape[0]
    zeros = torch.zeros(b.mask.shape, dtype=torch.long)
    return dm.modules["Batch"](obs=b.frames_float(), act=action_indices(b.actions), rew=zeros.float(),
                               end=zeros, trunc=zeros, mask_padding=b.mask, info=[{}] * n, segment_ids=[None] * n)


def train(dm: Diamond, ours: Ours, seconds: float, threads: int, out: Path, seed: int = 0,
          say=print) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg = ours.cfg
    ds = WindowDataset(cfg.data.stores, cfg.data.context, split="train", val_fraction=cfg.data.val_fraction)
    check_spec(ds.spec, str(cfg.data.stores[0]))
    model = build_denoiser(dm, len(ds.spec), cfg.data.context)
    model.setup_training(dm.modules["SigmaDistributionConfig"](**dm.sigma))
    t = dm.training
    if t.get("num_autoregressive_steps", 1) != 1:
        raise PeerError(f"{dm.src}/config/trainer.yaml: denoiser.training.num_autoregressive_steps is "
                        f"{t['num_autoregressive_steps']}; this comparison trains with 1 (DIAMOND's Atari setting)")
    opt = dm.modules["configure_opt"](model, **dm.optimizer)
    sched = dm.modules["get_lr_sched"](opt, t["lr_warmup_steps"])
    model.train()
    step, epoch, t0, losses = 0, 0, time.perf_counter(), []
    say(f"DIAMOND's denoiser: {sum(p.numel() for p in model.parameters()) / 1e6:.2f} M parameters, "
        f"{len(ds)} training windows, {seconds:.0f} s on {threads} thread(s)")
    while time.perf_counter() - t0 < seconds:
        for b in make_loader(ds, t["batch_size"], seed=seed, epoch=epoch, pin_memory=False):
            loss, _ = model(diamond_batch(dm, b))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), t["max_grad_norm"])
            opt.step()
            opt.zero_grad()
            sched.step()
            step += 1
            losses.append(loss.item())
            if step % 100 == 0:
                say(f"step {step}: loss {np.mean(losses[-100:]):.4f}, {time.perf_counter() - t0:.0f} s")
            if time.perf_counter() - t0 >= seconds:
                break
        epoch += 1
    elapsed = time.perf_counter() - t0
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out / WEIGHTS)
    info = {"diamond_commit": dm.commit(), "num_actions": len(ds.spec), "context": cfg.data.context,
            "steps": step, "seconds": elapsed, "budget_seconds": seconds, "threads": threads,
            "batch_size": t["batch_size"], "final_loss": float(np.mean(losses[-100:])) if losses else None,
            "ours": {"run": str(ours.run), "steps": ours.steps, "seconds": ours.seconds},
            "machine": machine()}
    (out / SETTINGS).write_text(json.dumps(info, indent=2))
    say(f"trained {step} steps in {elapsed:.0f} s")
    return info


# -- the predictor that eval drift runs ---------------------------------------------------------------------

class DiamondPredictor:
    """DIAMOND's denoiser and sampler behind eval's Predictor protocol (model.world_env)."""

    def __init__(self, dm: Diamond, folder: Path, spec: ControlSpec) -> None:
        from safetensors.torch import load_file

        self.info = json.loads((folder / SETTINGS).read_text())
        self.dm, self.spec, self.context = dm, spec, self.info["context"]
        self.model = build_denoiser(dm, self.info["num_actions"], self.context).eval()
        self.model.load_state_dict(load_file(folder / WEIGHTS))
        self._samplers: dict[int, object] = {}

    def sampler(self, steps: int):
        if steps not in self._samplers:
            known = {f.name for f in fields(self.dm.modules["DiffusionSamplerConfig"])}
            settings = {k: v for k, v in self.dm.sampler.items() if k in known}
            cfg = self.dm.modules["DiffusionSamplerConfig"](**{**settings, "num_steps_denoising": steps})
            self._samplers[steps] = self.dm.modules["DiffusionSampler"](self.model, cfg)
        return self._samplers[steps]

    @torch.no_grad()
    def next_frame(self, context, actions, mask, sampler, generator=None) -> torch.Tensor:
        # DIAMOND's sampler draws its noise from torch's global generator: seed it from ours. It
        # takes no padding mask (padded steps are the first frame repeated, as DIAMOND pads too).
        if generator is not None:
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device)))
        x, _ = self.sampler(sampler.steps).sample(context, action_indices(actions))
        return x.clamp(-1, 1)


# -- evaluation ---------------------------------------------------------------------------------------------

def figures(m: dict) -> dict:
    """A row of the table from a drift report's metrics.json."""
    r, o = m["rollouts"], m["one_step"]
    psnr, frozen = r["psnr"]["per_step"]["pooled"], r["frozen_frame"]["psnr"]["per_step_pooled"]
    at = lambda curve, k: curve[k - 1] if len(curve) >= k else None
    af = r.get("action_following") or {}
    chunks = af.get("per_chunk") or [None]
    sharp = r["health"]["sharpness"].get("per_chunk_ratio_to_real") or [None]
    return {"one_step_psnr": o["model"]["psnr_pooled"], "repeat_last_psnr": o["repeat_last"]["psnr_pooled"],
            "psnr_10": at(psnr, 10), "frozen_10": at(frozen, 10), "psnr_100": at(psnr, 100),
            "frozen_100": at(frozen, 100), "healthy_horizon": r["healthy_horizon"]["min"],
            "healthy_per_episode": r["healthy_horizon"]["per_episode"],
            "left_by": r["healthy_horizon"]["left_by"], "horizon": r["horizon"],
            "action_following": af.get("accuracy"), "action_ceiling": af.get("ceiling"),
            "action_first_chunk": chunks[0], "action_last_chunk": chunks[-1],
            "sharpness_first_chunk": sharp[0], "sharpness_last_chunk": sharp[-1]}


def evaluate(dm: Diamond, ours: Ours, diamond_dir: Path, settings, steps: int | None, threads: int,
             out: Path, videos: int) -> list[dict]:
    """Both models through eval drift's code on our run's held-out episodes; a report each in
    `out`/ours and `out`/diamond. Returns the table's rows."""
    from dreamcade.eval.__main__ import sampler_summary
    from dreamcade.eval.data import open_eval_data, rollout_cases
    from dreamcade.eval.drift import build_reference, evaluate_model
    from dreamcade.eval.report import drift_metrics, provenance, write_drift_report
    from dreamcade.model.config import sampler_settings
    from dreamcade.model.denoiser import EAGER

    x = load_both(dm, ours, diamond_dir, threads)
    model, cfg, meta, dev, speed, peer, info = x.model, x.cfg, x.meta, x.device, x.speed, x.peer, x.peer.info
    data = open_eval_data(cfg.data.stores, cfg.data.context, cfg.data.val_fraction, model.spec)
    ref = build_reference(data, settings, dev)
    cases = rollout_cases(data, cfg.data.context, settings.horizon, settings.episodes)
    rows = []
    ours_sampler = sampler_settings(cfg.sampler, steps=steps)
    peer_sampler = sampler_settings(cfg.sampler, steps=steps or int(dm.sampler["num_steps_denoising"]))
    peer_summary = {"steps": peer_sampler.steps, "context_noise": 0.0, "context_noise_used": 0.0,
                    "diamond": dm.sampler}  # DIAMOND gives the past frames clean
    cases_of = (("ours", "dreamcade", model, ours_sampler, speed, sampler_summary(ours_sampler, cfg, ref.notes),
                 {"path": str(ours.run), "step": int(meta.get("step", -1))}, ours.steps, ours.seconds),
                ("diamond", "DIAMOND", peer, peer_sampler, EAGER, peer_summary,
                 {"path": str(diamond_dir), "step": info["steps"]}, info["steps"], info["seconds"]))
    for folder, name, predictor, sampler, run_speed, summary, ck, steps_trained, seconds in cases_of:
        print(f"{name}: measuring on {len(cases)} held-out episodes, {settings.horizon} steps", file=sys.stderr)
        ev = evaluate_model(predictor, sampler, ref, data, cases, settings, dev, run_speed)
        prov = provenance(["python", "-m", "bench.peer", *sys.argv[1:]], ck, data.stores, [], str(dev), settings)
        m = drift_metrics(prov, ref, ev, [], settings, summary)
        (out / folder).mkdir()
        write_drift_report(out / folder, m, ev, [], ref, settings, videos)
        net = model if predictor is model else peer.model
        rows.append({"model": name, "parameters_m": sum(p.numel() for p in net.parameters()) / 1e6,
                     "sampler_steps": sampler.steps, "training_steps": steps_trained,
                     "training_minutes": seconds / 60, **figures(m)})
    return with_speeds(rows, measure_speeds(x, threads))


@dataclass
class Both:
    """Our model as eval loads it, and DIAMOND's behind the Predictor protocol, on the CPU."""

    model: torch.nn.Module
    cfg: object
    meta: dict
    device: torch.device
    speed: object
    peer: DiamondPredictor


def load_both(dm: Diamond, ours: Ours, diamond_dir: Path, threads: int) -> Both:
    from dreamcade.files.inference import load_for_inference
    from dreamcade.model.runtime import Runtime

    torch.set_num_threads(threads)
    model, cfg, meta, dev, speed, _ = load_for_inference(ours.run, Runtime("cpu", threads=threads))
    check_spec(model.spec, str(cfg.data.stores[0]))
    return Both(model, cfg, meta, dev, speed, DiamondPredictor(dm, diamond_dir, model.spec))


def measure_speeds(x: Both, threads: int) -> dict[str, dict]:
    """Frames/s of each model's next frame at batch 1 on the CPU, 1 and 3 sampler steps."""
    from dreamcade.model.denoiser import EAGER

    shape = open_store(x.cfg.data.stores[0]).frame_shape
    out = {}
    for name, predictor, run_speed in (("dreamcade", x.model, x.speed), ("DIAMOND", x.peer, EAGER)):
        out[name] = {f"fps_{k}_step{'s' if k > 1 else ''}":
                     1000 / next_frame_ms(predictor, x.cfg.data.context, x.model.spec, shape, k, threads, run_speed)
                     for k in (1, 3)}
    return out


def with_speeds(rows: list[dict], speeds: dict[str, dict]) -> list[dict]:
    return [{**r, **speeds[r["model"]]} for r in rows]


def next_frame_ms(predictor, context: int, spec: ControlSpec, shape, steps: int, threads: int, speed=None,
                  repeats: int = 20) -> float:
    """ms per next frame at batch 1 on the CPU, after three warm-up frames."""
    from bench.model import timed
    from dreamcade.model.config import SamplerConfig
    from dreamcade.model.world_env import predict_next

    torch.set_num_threads(threads)
    h, w = shape[:2]
    g = torch.Generator().manual_seed(0)
    ctx = torch.rand(1, context, 3, h, w, generator=g) * 2 - 1
    act = torch.zeros(1, context, len(spec))
    act[..., 0] = 1
    sampler = SamplerConfig(steps=steps, method="euler")  # like for like: DIAMOND samples with Euler
    kw = {} if speed is None else {"speed": speed}
    with torch.inference_mode():
        return timed(lambda: predict_next(predictor, ctx, act, None, sampler, g, **kw), torch.device("cpu"),
                     repeats) * 1000


COLUMNS = ["model", "parameters_m", "training_minutes", "training_steps", "sampler_steps", "one_step_psnr",
           "psnr_10", "frozen_10", "psnr_100", "frozen_100", "healthy_horizon", "action_first_chunk",
           "action_last_chunk", "action_ceiling", "fps_1_step", "fps_3_steps"]


# -- the command ----------------------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    from dreamcade.eval.settings import DriftSettings, add_options

    p = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--diamond-src", help="a checkout of DIAMOND's repository (" + CLONE + ")")
    p.add_argument("--ours", help="our training run to compare with (runs/<name>): its data, split and time")
    p.add_argument("--out", help="folder for DIAMOND's trained model (OUT/diamond) and the report (OUT/report)")
    p.add_argument("--stage", choices=("train", "eval", "all", "speed"), default="all",
                   help="train DIAMOND, eval both, or all (default); speed: measure frames/s again into the report")
    p.add_argument("--seconds", type=float, default=None,
                   help="DIAMOND's training time (default: the time our run trained, from its stats.jsonl)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: our run's train.threads)")
    p.add_argument("--steps", type=int, default=None,
                   help="sampler steps of both in the rollouts (default: each its own: ours its sampler.steps, "
                        "DIAMOND 3)")
    p.add_argument("--videos", type=int, default=2, help="MP4s per report")
    p.add_argument("--overwrite", action="store_true", help="replace OUT/diamond or OUT/report made before")
    add_options(p, DriftSettings, horizon=10000, episodes=4)
    return p.parse_args(argv)


def main(argv=None) -> int:
    from dreamcade.eval.settings import DriftSettings

    args = parse_args(argv)
    if not args.diamond_src:
        print("bench.peer needs DIAMOND's code, which this project does not ship: get it with\n"
              f"  {CLONE}\nthen pass that folder as --diamond-src (and `pip install omegaconf`, which its "
              "modules import)", file=sys.stderr)
        return 2
    try:
        if not args.ours or not args.out:
            raise PeerError("pass --ours runs/<name> (our run to compare with) and --out FOLDER")
        dm = load_diamond(args.diamond_src)
        ours = our_run(args.ours)
        threads = args.threads or ours.cfg.train.threads or 1
        out = Path(args.out)
        diamond_dir = out / "diamond"
        if args.stage in ("train", "all"):
            with Output(diamond_dir, what="DIAMOND model", inputs=ours.cfg.data.stores, overwrite=args.overwrite,
                        replaces=lambda p: (p / SETTINGS).is_file()) as o:
                train(dm, ours, args.seconds or ours.seconds, threads, o.path,
                      say=lambda s: print(s, file=sys.stderr))
        if args.stage in ("eval", "all"):
            if not (diamond_dir / SETTINGS).is_file():
                raise PeerError(f"{diamond_dir}: no trained DIAMOND model there; run --stage train first")
            settings = DriftSettings.from_args(args)
            with Output(out / "report", what="peer report", inputs=ours.cfg.data.stores, overwrite=args.overwrite,
                        replaces=lambda p: (p / "peer.json").is_file()) as o:
                rows = evaluate(dm, ours, diamond_dir, settings, args.steps, threads, o.path, args.videos)
                (o.path / "peer.json").write_text(json.dumps({"machine": machine(), "threads": threads,
                                                               "rows": rows}, indent=2))
            report("peer", rows, COLUMNS)
        if args.stage == "speed":  # again, with nothing else running
            table = out / "report" / "peer.json"
            if not table.is_file():
                raise PeerError(f"{table}: no report to add the speeds to; run --stage eval first")
            saved = json.loads(table.read_text())
            saved["rows"] = with_speeds(saved["rows"], measure_speeds(load_both(dm, ours, diamond_dir, threads),
                                                                      threads))
            saved["speed_machine"] = machine()
            partial = table.with_name(".peer.json.partial")
            partial.write_text(json.dumps(saved, indent=2))
            os.replace(partial, table)
            report("peer", saved["rows"], COLUMNS)
    except (PeerError, OutputError) as e:
        print(f"bench.peer: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
