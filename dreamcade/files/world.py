"""A world folder: a trained model that leaves the machine it was trained on.

    WORLD/
      model/                                the model folder, as in a run (dreamcade.files.checkpoint):
        config.json                         the denoiser's arguments (frame size, control spec, ...)
                                            and the run's config and step
        diffusion_pytorch_model.safetensors the EMA weights (never a pickle)
      upsampler/                            a two-stage world's second stage (model/upsampler.py), a
                                            model folder of the same layout; absent for one stage
      reference.zarr/                       real episode starts (frames and actions) of the game: what
                                            play starts from and what health is measured against
      world.json                            where it came from: data, training, eval figures, commands
      README.md                             the model card

`Denoiser.from_pretrained(WORLD, subfolder="model")` loads the network as any diffusers model;
play and eval take a world folder wherever they take a run folder
(dreamcade.files.inference.load_for_inference). A loaded world's `data.stores` is its own
reference store, so every path that reads "the checkpoint's training data" reads that instead.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from dreamcade.dataset.errors import plural
from dreamcade.dataset.source import SCREEN, game_name
from dreamcade.dataset.store import Store, StoreError, StoreWriter, open_store, software_version, store_exists
from dreamcade.files.checkpoint import (CONFIG_FILE, MODEL_DIR, CheckpointError, load_model, load_upsampler, model_home,
                                       save_model)
from dreamcade.files.frames import check_frames
from dreamcade.model.config import Config, guided
from dreamcade.model.denoiser import Denoiser
from dreamcade.model.upsampler import STAGE

WORLD_FORMAT = "dreamcade.world"
WORLD_VERSION = 2
REFERENCE = "reference.zarr"
INFO_FILE = "world.json"
REFERENCE_BYTES = 24 << 20
"""The most raw frame bytes a reference store takes (compressed on disk it is a few MB at most)."""


def is_world(path: str | Path) -> bool:
    """A world folder: its world.json or reference store, or (format 1) a config.json written for `World`."""
    path = Path(path)
    if (path / INFO_FILE).is_file() or (path / REFERENCE).exists():
        return True
    try:
        return json.loads((path / CONFIG_FILE).read_text()).get("_class_name") == "World"
    except (OSError, ValueError, AttributeError):
        return False


def load_world(path: str | Path) -> tuple[Denoiser, Config, dict]:
    """(the denoiser on the CPU in eval mode, its config with data.stores = the world's reference
    store, metadata). CheckpointError names the file."""
    path = Path(path)
    again = f"export it again (`dreamcade export RUN --out {path}`)"
    if not (path / REFERENCE).exists():
        raise CheckpointError(f"{path / REFERENCE}: missing from the world folder; {again}")
    if not ((path / MODEL_DIR).is_dir() or (path / CONFIG_FILE).is_file()):
        raise CheckpointError(f"{path / MODEL_DIR}: missing from the world folder; {again}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local folder: never the network
    model, cfg, meta = load_model(path)
    cfg.data.stores = [str((path / REFERENCE).resolve())]
    return model, cfg, {**meta, "world": str(path)}


def upsampler_folder(path: str | Path, cfg: Config) -> Path | None:
    """Where the second stage of the model at `path` is: a world's upsampler/, a run's
    upsampler/model/; None for a one-stage model. CheckpointError when the config says two
    stages and the second is not there."""
    if cfg.upsampler.scale == 1:
        return None
    path = Path(path)
    home = path if is_world(path) else model_home(path)
    for folder in (home / STAGE, home / STAGE / MODEL_DIR):
        if (folder / CONFIG_FILE).is_file():
            return folder
    fix = ("export the world again from its run (`dreamcade export RUN --out WORLD`) once the run's upsampler is "
           "trained (`dreamcade train --config RUN/config.yaml --resume`)" if is_world(path) else
           f"finish its training (`dreamcade train --config {home / 'config.yaml'} --resume`)")
    raise CheckpointError(f"{home / STAGE}: the model is the first of two stages (upsampler.scale "
                          f"{cfg.upsampler.scale}) and its upsampler is not there; {fix}")


# -- export -------------------------------------------------------------------------------------------

def reference_episodes(stores: list[Store], cfg: Config, episodes: int) -> tuple[list[tuple[Store, int, int]], str]:
    """Up to `episodes` episodes to keep as start contexts: the run's held-out ones first (its
    own split), then training ones; each at least the context plus one frame long."""
    from dreamcade.dataset.windows import NoEpisodesError, WindowDataset

    L, kw = cfg.data.context, dict(context=1, val_fraction=cfg.data.val_fraction, mode="stream", gap=cfg.data.context)
    try:
        held = WindowDataset(stores, split="val", **kw).episodes
    except NoEpisodesError:
        held = []
    train = WindowDataset(stores, split="train" if held else "all", **kw).episodes
    by_path = {s.path: s for s in stores}
    picked = [(by_path[p], a, b) for p, a, b in held + train if b - a > L][:episodes]
    if not picked:
        raise StoreError(f"{stores[0].path}: no episode has more than {L} frames (the model's context) "
                         "to start a world from")
    n_held = sum(1 for s, a, _ in picked if (s.path, a) in {(p, a) for p, a, _ in held})
    return picked, f"{n_held} held out in training, {len(picked) - n_held} trained on"


def write_reference(out: Path, picked: list[tuple[Store, int, int]], frames_each: int) -> dict:
    """The reference store: the first `frames_each` frames of each picked episode, with the
    first store's source (so play can rebuild the real game) and fps."""
    first = picked[0][0]
    h, w = first.frame_shape[:2]
    n_each = max(2, min(frames_each, REFERENCE_BYTES // (len(picked) * h * w * 3)))
    kept = 0
    with StoreWriter(out, spec=first.spec, fps=first.fps, frame_size=(w, h), source=first.attrs.get("source") or {},
                     extra_attrs={"world_reference": {"from": sorted({str(s.path) for s, _, _ in picked})}}) as wr:
        for s, a, b in picked:
            stop = min(b, a + n_each)
            frames, actions = s.read_frames(a, stop), s.read_actions(a, stop)
            t = np.arange(len(frames)) / s.fps
            wr.begin_episode()
            for f, act, ti in zip(frames, actions, t):
                wr.append(f, act, float(ti))
            kept += len(frames)
    return {"episodes": len(picked), "frames": kept, "frames_per_episode": n_each}


def training_summary(run: Path) -> dict:
    """Steps, minutes and the last validation figures from a run's stats.jsonl."""
    lines = []
    if (run / "stats.jsonl").is_file():
        for line in (run / "stats.jsonl").read_text().splitlines():
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    val = [x for x in lines if "val/psnr" in x]
    up = [x for x in lines if "upsampler/psnr" in x]
    out = {"minutes": round((lines[-1]["time"] - lines[0]["time"]) / 60, 1) if len(lines) > 1 else None}
    if up:
        out.update({k.replace("/", "_"): round(up[-1][k], 3) for k in up[-1]
                    if k.startswith("upsampler/") and ("psnr" in k or "sharpness" in k)})
    if val:
        out.update({"val_psnr": round(val[-1]["val/psnr"], 2),
                    "val_psnr_repeat_last": round(val[-1]["val/psnr_repeat_last"], 2)})
    return out


HELD_OUT_NOUN = {"episode": "held-out episode", "time": "held-out segment"}
"""What an eval report's rollouts started from (its reference's `held_out_by`): None, nothing held out."""


def report_summary(report: Path, run: Path | None = None, step: int | None = None) -> dict:
    """The headline figures of an `eval drift` report (its metrics.json); with `run` and `step`,
    the report must be of that model (CheckpointError names the model it measured)."""
    try:
        m = json.loads((report / "metrics.json").read_text())
        r = m["rollouts"]
        a = r.get("action_following") or {}
        ck = m.get("checkpoint") or {}
        out = {"report": str(report), "command": m.get("command"), "one_step_psnr": m["one_step"]["model"]["psnr_pooled"],
               "repeat_last_psnr": m["one_step"]["repeat_last"]["psnr_pooled"], "horizon": r["horizon"],
               "episodes": len(r["episodes"]), "held_out_by": (m.get("reference") or {}).get("held_out_by", "episode"),
               "healthy_horizon_min": r["healthy_horizon"]["min"],
               "healthy_horizon_median": r["healthy_horizon"]["median"],
               "action_following": a.get("accuracy"), "action_following_ceiling": a.get("ceiling"),
               "action_following_chance": a.get("chance"),
               "action_following_unmeasured": a.get("unmeasured"),
               "action_classifier": (m.get("reference") or {}).get("action_classifier")}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{report}: not an `eval drift` report with rollouts ({type(e).__name__}: {e}); "
                              "pass the --out folder of `dreamcade eval drift --checkpoint RUN`") from None
    if run is not None and not measured(ck, run, step):
        raise CheckpointError(f"--report {report}: measured {ck.get('path')} (step {ck.get('step')}), not {run} "
                              f"(step {step}); evaluate this run (`dreamcade eval drift --checkpoint {run} --out "
                              "REPORT`) and pass that report")
    return out


def scored_on(classifier: dict | None) -> str:
    """" on K, ... (the keys the classifier reads on real frames; not L, ...)" for the action
    classifier of a report's metrics.json (eval.idm.IdmResult.summary) that left keys unscored,
    else "": what an action-following figure is of, in the eval's summary and a world's card."""
    if not classifier or not classifier.get("unread_controls"):
        return ""
    return (f" on {', '.join(classifier['scored_controls'])} (the keys the classifier reads on real frames; "
            f"not {', '.join(classifier['unread_controls'])})")


def measured(checkpoint: dict, run: Path, step: int | None) -> bool:
    """Whether a report's checkpoint (metrics.json's {path, step}) is `run` at `step`: its run
    folder, model file or world folder, as written relative to where eval ran or absolute."""
    from dreamcade.dataset.outputs import local

    path = checkpoint.get("path")
    if not isinstance(path, str) or (step is not None and str(checkpoint.get("step")) != str(step)):
        return False
    run = run.resolve()
    return local(path, "--report") in {run, run / MODEL_DIR, run / "model.safetensors", run / "world"}


def export_world(run: str | Path, out: str | Path, data: list[str] | None = None, report: str | Path | None = None,
                 episodes: int = 8, frames_each: int = 500, command: str | None = None,
                 overwrite: bool = False) -> dict:
    """Write the world folder of a run (its model and training data, or `data`)
    beside `out` and move it into place whole (dataset.outputs); returns world.json's content."""
    from dreamcade.dataset.outputs import Output

    run = Path(run)
    if is_world(run):
        raise CheckpointError(f"{run}: is a world folder already; copy it, or export the run it came from")
    denoiser, cfg, meta = load_model(run)
    paths = data or cfg.data.stores
    missing = [p for p in paths if not store_exists(p)]
    if not paths or missing:
        raise StoreError(f"the run's training data ({', '.join(missing or ['none recorded'])}) is not here to "
                         "take start contexts from; pass --data STORE (recordings of the game, its control spec)")
    run_dir = model_home(run)
    output = Output(out, what="world folder", inputs=paths, around=[run_dir], overwrite=overwrite,
                    replaces=is_world)
    stores = [open_store(p, expect_spec=denoiser.spec) for p in paths]
    for s in stores:  # the start contexts must be frames the model was trained on
        check_frames(s, denoiser, cfg, f"the model {run}")
    figures = report_summary(Path(report), run_dir, int(meta.get("step", 0))) if report else None
    stage = upsampler_folder(run, cfg)
    upsampler = load_upsampler(stage) if stage is not None else None
    with output as o:  # checked and locked here; in place only when complete
        tmp = o.path
        picked, which = reference_episodes(stores, cfg, episodes)
        ref = {**write_reference(tmp / REFERENCE, picked, frames_each), "which": which}
        if denoiser.frame_size is None:  # a model of format 1 learns its size from its data here
            denoiser.register_to_config(frame_size=list(stores[0].frame_shape[:2]))
            denoiser.frame_size = stores[0].frame_shape[:2]
        save_model(tmp, denoiser, cfg, int(meta.get("step", 0)),
                   {k: v for k, v in meta.items() if k == "distilled"})
        if upsampler is not None:
            up, up_cfg, up_meta = upsampler
            save_model(tmp, up, up_cfg, int(up_meta["step"]), subfolder=STAGE)
        info = {"format": WORLD_FORMAT, "format_version": WORLD_VERSION, "name": cfg.name,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "software_version": software_version(),
                "step": int(meta.get("step", 0)), "game": game_name(stores[0].attrs.get("source")),
                "data": data_summary(stores), "reference": ref, "training": training_summary(run_dir),
                "eval": figures, "commands": {"train": train_command(run_dir), "export": command}}
        if upsampler is not None:
            up = upsampler[0]
            (h, w), (lh, lw) = up.frame_size, up.low_size
            u = upsampler[1].upsampler
            info["upsampler"] = {"scale": up.scale, "size": f"{w}x{h}", "dynamics_size": f"{lw}x{lh}",
                                 "channels": list(u.channels), "sampler_steps": u.sampler_steps, "method": u.method,
                                 "step": int(upsampler[2]["step"]), "training": training_summary(stage.parent)}
        if meta.get("distilled"):  # a student of `dreamcade distill`: its training is the teacher's
            d = json.loads(meta["distilled"])
            info["distilled"] = d
            teacher = Path(d["teacher"])
            info["commands"]["train"] = train_command(teacher.parent if teacher.suffix == ".safetensors" else teacher)
            info["commands"]["distill"] = (f"dreamcade distill --checkpoint {d['teacher']} --steps {d['steps']} "
                                           f"--iterations {d['iterations']} --name {cfg.name}"
                                           + (f" --rollout {d['rollout']}" if d.get("rollout", 1) > 1 else "")
                                           + (f" --init {d['init']}" if d.get("init") else ""))
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")
        (tmp / "README.md").write_text(model_card(info, cfg))
    return info


def session_of(distilled: dict) -> str:
    """How a student trained on (`distill --rollout --init`), for its card; '' for the plain one."""
    n, init = distilled.get("rollout", 1), distilled.get("init")
    return ((f" along {n} frames of the teacher's session" if n > 1 else "")
            + (f" from the student {init}" if init else ""))


def data_summary(stores: list[Store]) -> dict:
    frames = sum(len(s) for s in stores)
    seconds = sum(len(s) / s.fps for s in stores)
    h, w = stores[0].frame_shape[:2]
    return {"stores": [str(s.path) for s in stores], "frames": frames, "hours": round(seconds / 3600, 3),
            "episodes": sum(len(s.episodes()) for s in stores), "fps": stores[0].fps, "size": f"{w}x{h}"}


def train_command(run: Path) -> str | None:
    return f"dreamcade train --config {run / 'config.yaml'}" if (run / "config.yaml").is_file() else None


def teacher_sampler(distilled: dict) -> str:
    """"6 sampler steps, heun": how a student's teacher sampled (its method, and its guidance on
    the input when above 1, where recorded)."""
    method, guidance = distilled.get("teacher_method"), distilled.get("teacher_guidance", 1)
    return (f"{distilled['teacher_steps']} sampler steps" + (f", {method}" if method else "")
            + guided(guidance, distilled.get("teacher_guidance_rescale", 0)))


def model_card(info: dict, cfg: Config) -> str:
    """README.md: the model card (diffusers' front matter, then what a player wants to know)."""
    d, t, e, r = info["data"], info["training"], info["eval"], info["reference"]
    fig = lambda x, fmt="{:.2f}": "not measured" if x is None else fmt.format(x)
    # the game's tag, quoted (a window title may hold ": "); none for an unnamed screen recording
    tag = [] if info["game"] == SCREEN else [f"- {json.dumps(info['game'].split('/')[-1])}"]
    lines = ["---", "library_name: diffusers", "tags:", "- world-model", "- dreamcade", "- diffusion", *tag,
             "---", "", f"# {info['name']}: a dreamcade world of {info['game']}", "",
             "An action-conditioned diffusion world model: it generates the game frame by frame from "
             "your input. Play it with `dreamcade play --checkpoint THIS_FOLDER`; it starts from the "
             "real episode starts kept in `reference.zarr` and needs nothing else.", "",
             "| | |", "|---|---|",
             f"| game | {info['game']} |",
             f"| data | {d['frames']:,} frames ({d['hours']:.2f} hours at {d['fps']:g} frames/s), "
             f"{plural(d['episodes'], 'episode')}, {d['size']} |",
             (f"| training | distilled from {info['distilled']['teacher']} ({teacher_sampler(info['distilled'])}, "
              f"trained {info['step']:,} steps) in {info['distilled']['iterations']:,} iterations"
              f"{session_of(info['distilled'])}, {fig(t.get('minutes'), '{:.1f} minutes')} |"
              if info.get("distilled") else
              f"| training | {info['step']:,} steps, {fig(t.get('minutes'), '{:.1f} minutes')} |"),
             f"| model | {sum(1 for _ in cfg.model.channels)} UNet levels {cfg.model.channels}, context {cfg.data.context} frames, "
             f"{cfg.sampler.steps} sampler steps ({cfg.sampler.method}{guided(cfg.sampler.guidance, cfg.sampler.guidance_rescale)}) |"]
    if info.get("upsampler"):
        u, ut = info["upsampler"], info["upsampler"]["training"]
        lines.append(f"| two stages | the model above makes each frame at {u['dynamics_size']}; an upsampler "
                     f"(`upsampler/`, {u['channels']}, {u['sampler_steps']} sampler steps, "
                     f"{u['method']}) draws it at {u['size']} (x{u['scale']}); trained {u['step']:,} steps, "
                     f"{fig(ut.get('minutes'), '{:.1f} minutes')}; PSNR of real low frames upsampled "
                     f"{fig(ut.get('upsampler_psnr'), '{:.2f} dB')} (bicubic: {fig(ut.get('upsampler_psnr_bicubic'), '{:.2f} dB')}) |")
    if e:
        lines += [f"| one-step PSNR | {fig(e['one_step_psnr'])} dB (repeating the last frame: {fig(e['repeat_last_psnr'])} dB) |",
                  f"| healthy horizon | {e['healthy_horizon_min']} steps in the worst of "
                  f"{plural(e['episodes'], HELD_OUT_NOUN.get(e.get('held_out_by'), 'episode'))}, "
                  f"{fig(e['healthy_horizon_median'], '{:.0f}')} median, of {e['horizon']} |",
                  f"| action following | {fig(e['action_following'], '{:.3f}')}{scored_on(e['action_classifier'])} "
                  f"(real-data ceiling {fig(e['action_following_ceiling'], '{:.3f}')}, "
                  f"chance {fig(e['action_following_chance'], '{:.3f}')}) |" if not e.get("action_following_unmeasured") else
                  f"| action following | unmeasured: {e['action_following_unmeasured']} |"]
    else:
        lines += [f"| one-step PSNR | {fig(t.get('val_psnr'), '{:.2f} dB')} on training's validation batches "
                  f"(repeating the last frame: {fig(t.get('val_psnr_repeat_last'), '{:.2f} dB')}) |",
                  "| healthy horizon | not measured: run `dreamcade eval drift` and export with `--report` |",
                  "| action following | not measured |"]
    lines += [f"| start contexts | {plural(r['episodes'], 'episode')}, {r['frames']:,} frames ({r['which']}) |", "",
              "## How it was made", "", "```"] + [c for c in (info["commands"]["train"],
                                                                     info["commands"].get("distill")) if c]
    if e and e.get("command"):
        lines.append(e["command"])
    if info["commands"].get("export"):
        lines.append(info["commands"]["export"])
    lines += ["```", "", "## Use", "", "```",
              "dreamcade play --checkpoint THIS_FOLDER", "dreamcade eval drift --checkpoint THIS_FOLDER --out report",
              "dreamcade eval drift --checkpoint THIS_FOLDER --session SESSION.zarr --out report", "```", "",
              "In Python: `from dreamcade.model.denoiser import Denoiser; Denoiser.from_pretrained(THIS_FOLDER, subfolder='model')`"
              + (" and `from dreamcade.model.upsampler import Upsampler; Upsampler.from_pretrained(THIS_FOLDER, "
                 "subfolder='upsampler')`." if info.get("upsampler") else "."), ""]
    return "\n".join(lines)
