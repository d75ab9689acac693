"""Checkpoints, all in safetensors and JSON (nothing is ever unpickled).

- Training state: `<run>/checkpoints/step_XXXXXXXX/` with model, EMA and optimizer tensors and
  `state.json` (step, config, RNG states). It is written to a temporary folder, fsynced, and
  renamed into place, then the `latest` pointer is replaced the same way: a killed run never
  leaves a half-written checkpoint where resuming looks. The newest `keep` are kept.
- The model folder: `<run>/model/` and `<world>/model/` alike, diffusers' layout (config.json: the
  denoiser's registered arguments, frame size and control spec included, and `_dreamcade`: the
  run's config and step; diffusion_pytorch_model.safetensors: the EMA weights), which play and eval
  load to rebuild the model. Format 1 (a run's model.safetensors, a world's `World` config) is read.
- A world folder (dreamcade.files.world) is the model folder with start contexts and a card.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save_file

from dreamcade.dataset.controls import ControlSpec, SpecError
from dreamcade.dataset.errors import UserError
from dreamcade.dataset.outputs import fsync, remove_stale_copies, replace_folder, write_file
from dreamcade.dataset.store import software_version
from dreamcade.model.config import Config, ConfigError
from dreamcade.files.config_file import from_dict, to_dict
from dreamcade.model.denoiser import Denoiser

MODEL_FORMAT = "dreamcade.model"
MODEL_VERSION = 2
MODEL_DIR = "model"
"""A run's and a world's model folder: FOLDER/model/{config.json, diffusion_pytorch_model.safetensors}."""
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "diffusion_pytorch_model.safetensors"
LEGACY_FILE = "model.safetensors"
"""Format 1: one safetensors file with the config and control spec in its metadata (still read)."""


class CheckpointError(UserError):
    """A checkpoint that cannot be loaded; the message names the file and the fix."""


# -- helpers ---------------------------------------------------------------------------------------

def _save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(path), metadata=metadata)
    os.chmod(path, 0o666 & ~_umask())  # safetensors writes 0600; a model is made to be shared
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_complete(path: Path) -> None:
    """Refuse a safetensors file shorter (or longer) than its header says: a cut-short copy or
    download, named as such rather than as a decoding error."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n)) if 8 + n <= size else None
    except (OSError, ValueError):
        header = None
    if header is None:
        raise CheckpointError(f"{path}: not a safetensors file, or cut short inside its header ({size} bytes); "
                              "copy or download it again")
    end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
    if size < 8 + n + end:
        raise CheckpointError(f"{path}: truncated: {size} bytes, but its header describes {8 + n + end}; "
                              "the copy or download was cut short, so copy it again")


# -- the model folder ---------------------------------------------------------------------------------

def save_model(folder: str | Path, model: torch.nn.Module, cfg: Config, step: int, extra: dict[str, str] | None = None,
               subfolder: str = MODEL_DIR) -> Path:
    """Write FOLDER/model (or FOLDER/`subfolder`: a world's upsampler/) whole (a run's and a world's alike): config.json, the denoiser's
    registered arguments (diffusers' ConfigMixin) plus `_dreamcade` (format, step, the run's
    config, software version, `extra`: more strings, e.g. how a distilled model was made), and
    the weights of `model` (normally the EMA). Built beside it and swapped in: a killed process
    leaves the old folder or the new one, never a mixture."""
    folder = Path(folder)
    target = folder / subfolder
    tmp = folder / f".{subfolder}.tmp-{os.getpid()}"
    if folder.is_dir():
        remove_stale_copies(target)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _save_tensors(model.state_dict(), tmp / WEIGHTS_FILE, {"format": "pt"})
        config = json.loads(model.to_json_string())
        config["_dreamcade"] = {"format": MODEL_FORMAT, "format_version": MODEL_VERSION, "step": int(step),
                                "config": to_dict(cfg), "software_version": software_version(), **(extra or {})}
        write_file(tmp / CONFIG_FILE, (json.dumps(config, indent=1) + "\n").encode())
        os.chmod(tmp, 0o777 & ~_umask())
        replace_folder(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def model_folder(path: str | Path) -> Path:
    """Where the model of `path` is: a run or world folder's model/, a model folder itself, a
    format-1 model.safetensors (or a folder holding one) or a format-1 world; CheckpointError else."""
    path = Path(path)
    if path.is_file() and path.name == WEIGHTS_FILE:
        path = path.parent
    if path.is_dir():
        aside = sorted(path.glob(f".{MODEL_DIR}.old-*"))  # a save cut short between two renames
        for candidate in (path / MODEL_DIR, path, *([aside[-1]] if aside and not (path / MODEL_DIR).exists() else [])):
            if (candidate / CONFIG_FILE).is_file() or (candidate / WEIGHTS_FILE).is_file():
                return candidate
        if (path / LEGACY_FILE).is_file():
            return path / LEGACY_FILE
        raise CheckpointError(f"{path}: no model in this folder (no {MODEL_DIR}/{CONFIG_FILE}); train first "
                              "(`dreamcade train --config demo --data STORE`) or point at a run or world folder")
    if path.suffix == ".safetensors" and path.is_file():
        return path
    raise CheckpointError(f"{path}: no such checkpoint; pass a run folder (runs/<name>) or a world folder")


def model_home(path: str | Path) -> Path:
    """The run (or world) folder a model path belongs to: a model file's or a model/ folder's
    parent, and a run's own world/ is its run's."""
    p = Path(path).resolve()
    if p.is_file():
        p = p.parent
    if p.name == MODEL_DIR and (p / CONFIG_FILE).is_file():
        p = p.parent
    if p.name == "world" and (p.parent / "config.yaml").is_file():
        p = p.parent
    return p


def has_model(folder: str | Path) -> bool:
    """A model folder (or a format-1 model file) is in `folder`."""
    folder = Path(folder)
    return (folder / MODEL_DIR / CONFIG_FILE).is_file() or (folder / LEGACY_FILE).is_file()


def load_model(path: str | Path, device: str | torch.device = "cpu",
               expect_spec: ControlSpec | None = None) -> tuple[Denoiser, Config, dict]:
    """Rebuild the model of a run folder, world folder or model folder; returns (model in eval
    mode, the run's config, metadata: format, step, software_version and what was saved with it).
    Everything is checked before it is used: CheckpointError names the file and the fix."""
    where = model_folder(path)
    if where.is_file():
        model, cfg, meta = _load_format_1(where)
    else:
        model, cfg, meta = _load_folder(where)
    check_spec(model.spec, expect_spec, path)
    return model.to(device).eval(), cfg, meta


def _read_folder(folder: Path, again: str, what: str = "the model folder") -> tuple[Path, Path, dict]:
    """(weights file, config file, config.json's mapping) of a model folder, both files there,
    the weights complete and the config readable JSON; CheckpointError ending in `again` else."""
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise CheckpointError(f"{folder / name}: missing from {what}; {again}")
    weights, config = folder / WEIGHTS_FILE, folder / CONFIG_FILE
    check_complete(weights)
    try:
        raw = json.loads(config.read_text())
        if not isinstance(raw, dict):
            raise ValueError(f"the file holds a {type(raw).__name__}, not a mapping")
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{config}: not readable JSON ({e}); {again}") from None
    return weights, config, raw


def _load_folder(folder: Path) -> tuple[Denoiser, Config, dict]:
    again = "save or export it again"
    weights, config, raw = _read_folder(folder, again)
    if raw.get("_class_name") == "World":
        return _load_world_format_1(folder, raw)
    ours = raw.get("_dreamcade")
    if raw.get("_class_name") != Denoiser.__name__ or not isinstance(ours, dict) or ours.get("format") != MODEL_FORMAT:
        raise CheckpointError(f"{config}: not a dreamcade model (its _class_name is {raw.get('_class_name')!r})")
    if int(ours.get("format_version", 0)) > MODEL_VERSION:
        raise CheckpointError(f"{config}: made by a newer dreamcade (model format {ours['format_version']}); upgrade")
    try:
        cfg = from_dict(Config, ours["config"], where=f"{config} _dreamcade.config")
        cfg.check()
        model = Denoiser(**Denoiser.arguments(raw))
    except (ConfigError, SpecError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{config}: broken: {type(e).__name__}: {e}; {again}") from None
    _load_weights(model, weights, f"{config}'s arguments")
    meta = {k: v if isinstance(v, str) else json.dumps(v) for k, v in ours.items() if k != "config"}
    meta["step"] = str(ours.get("step", 0))
    return model, cfg, meta


def load_upsampler(folder: str | Path) -> tuple[torch.nn.Module, Config, dict]:
    """The upsampler of a two-stage world (model/upsampler.py) from its model folder (a world's
    upsampler/, a run's upsampler/model/): (model on the CPU in eval mode, its run's config,
    metadata), everything checked as load_model checks a denoiser."""
    from dreamcade.model.upsampler import Upsampler

    again = "train its second stage again (`dreamcade train ... --resume`) or export the world again"
    weights, config, raw = _read_folder(Path(folder), again, "the upsampler's folder")
    try:
        ours = raw["_dreamcade"]
        if raw.get("_class_name") != Upsampler.__name__ or ours.get("format") != MODEL_FORMAT:
            raise ValueError(f"its _class_name is {raw.get('_class_name')!r}, not {Upsampler.__name__!r}")
        cfg = from_dict(Config, ours["config"], where=f"{config} _dreamcade.config")
        cfg.check()
        model = Upsampler(**{k: raw[k] for k in Upsampler.init_keys()})
    except (ConfigError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{config}: not a dreamcade upsampler ({type(e).__name__}: {e}); {again}") from None
    _load_weights(model, weights, f"{config}'s arguments")
    return model.eval(), cfg, {"step": str(ours.get("step", 0))}


def _load_weights(model: torch.nn.Module, weights: Path, against: str, prefix: str = "") -> None:
    try:
        tensors = load_file(str(weights))
        model.load_state_dict({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{weights}: not a readable safetensors file ({e})") from None
    except RuntimeError as e:  # weights of another shape than the arguments say
        lines = [x.strip() for x in str(e).strip().splitlines() if x.strip()]
        detail = (lines[1] if len(lines) > 1 and lines[0].startswith("Error(s)") else lines[0] if lines else "")[:200]
        raise CheckpointError(f"{weights}: does not fit {against} ({detail}); the file is damaged or was "
                              "edited: save or export it again") from None


def _load_format_1(path: Path) -> tuple[Denoiser, Config, dict]:
    """A model.safetensors of format 1 (config and control spec in its metadata, no frame size)."""
    check_complete(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    if meta.get("format") != MODEL_FORMAT:
        raise CheckpointError(f"{path}: not a dreamcade model (metadata 'format' is {meta.get('format')!r})")
    if int(meta.get("format_version", 0)) > 1:
        raise CheckpointError(f"{path}: a model file of format {meta['format_version']}; upgrade dreamcade")
    try:
        cfg = from_dict(Config, json.loads(meta["config"]), where=f"{path} config")
        cfg.check()
        spec = ControlSpec.from_dict(json.loads(meta["control_spec"]), where=f"{path} control_spec")
    except (ConfigError, SpecError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: broken metadata: {e}") from None
    model = Denoiser.build(cfg.model, cfg.diffusion, spec, cfg.data.context, None)
    _load_weights(model, path, "its own config")
    return model, cfg, meta


def _load_world_format_1(folder: Path, raw: dict) -> tuple[Denoiser, Config, dict]:
    """A world folder of format 1: config.json of a `World` wrapping the denoiser (no frame size)."""
    where = folder / CONFIG_FILE
    try:
        cfg = from_dict(Config, raw["config"], where=f"{where} config")
        cfg.check()
        spec = ControlSpec.from_dict(raw["control_spec"], where=f"{where} control_spec")
    except (ConfigError, SpecError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{where}: not a loadable world ({type(e).__name__}: {e}); export it again") from None
    model = Denoiser.build(cfg.model, cfg.diffusion, spec, cfg.data.context, None)
    _load_weights(model, folder / WEIGHTS_FILE, f"{where}", prefix="denoiser.")
    return model, cfg, {"format": "dreamcade.world", "format_version": "1", "step": str(raw.get("step", 0))}


def check_spec(spec: ControlSpec, expect: ControlSpec | None, path) -> None:
    """The model's control spec must be the data's; CheckpointError says how they differ."""
    if expect is not None:
        try:
            spec.check_same(expect, f"the model {path}", "the data")
        except SpecError as e:
            raise CheckpointError(str(e)) from None


# -- full training state -------------------------------------------------------------------------------

def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list]:
    sd = opt.state_dict()
    tensors = {f"{pid}.{k}": v if torch.is_tensor(v) else torch.tensor(v)
               for pid, st in sd["state"].items() for k, v in st.items()}
    return tensors, sd["param_groups"]


def _load_optimizer(opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], groups: list) -> None:
    state: dict[int, dict] = {}
    for key, v in tensors.items():
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": groups})


def rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    np_state = np.random.get_state()
    py_state = random.getstate()
    plain = {"numpy": [np_state[0], np_state[1].tolist(), *np_state[2:]],
             "python": [py_state[0], list(py_state[1]), py_state[2]]}
    return tensors, plain


def set_rng_state(tensors: dict[str, torch.Tensor], plain: dict) -> None:
    torch.set_rng_state(tensors["torch"])
    if torch.cuda.is_available():
        states = [tensors[k] for k in sorted(tensors) if k.startswith("cuda")]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)
    n = plain["numpy"]
    np.random.set_state((n[0], np.array(n[1], np.uint32), *n[2:]))
    p = plain["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))


def save_training_state(run_dir: Path, step: int, model: torch.nn.Module, ema: torch.nn.Module,
                        optimizer: torch.optim.Optimizer, cfg: Config, extra: dict, keep: int,
                        rngs: list[tuple[dict, dict]] | None = None) -> Path:
    """Write a full checkpoint atomically, point `latest` at it, prune old ones. `rngs`: the RNG
    states of every process (rank order) of a multi-process run, each resumed as its own; by
    default this process's."""
    ckpts = Path(run_dir) / "checkpoints"
    ckpts.mkdir(parents=True, exist_ok=True)
    name = f"step_{step:08d}"
    tmp = ckpts / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:  # a failure (a full disk) leaves no temporary behind, and the last checkpoint as it was
        _save_tensors(model.state_dict(), tmp / "model.safetensors")
        _save_tensors(ema.state_dict(), tmp / "ema.safetensors")
        opt_tensors, groups = _optimizer_tensors(optimizer)
        _save_tensors(opt_tensors, tmp / "optimizer.safetensors")
        rngs = rngs or [rng_state()]
        for rank, (tensors, _) in enumerate(rngs):
            _save_tensors(tensors, tmp / ("rng.safetensors" if rank == 0 else f"rng_rank{rank}.safetensors"))
        state = {"step": step, "config": to_dict(cfg), "param_groups": groups, "rng": rngs[0][1],
                 "rng_ranks": [plain for _, plain in rngs[1:]], "processes": len(rngs), **extra}
        write_file(tmp / "state.json", json.dumps(state).encode())
        fsync(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_folder(tmp, ckpts / name)
    write_file(ckpts / "latest", name.encode())
    for old in sorted(p for p in ckpts.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return ckpts / name


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint `latest` points to, or else the newest complete one; never a temporary."""
    ckpts = Path(run_dir) / "checkpoints"
    pointer = ckpts / "latest"
    if pointer.is_file():
        target = ckpts / pointer.read_text().strip()
        if (target / "state.json").is_file():
            return target
    complete = sorted(p for p in ckpts.glob("step_*") if (p / "state.json").is_file())
    return complete[-1] if complete else None


def load_training_state(path: Path, model: torch.nn.Module, ema: torch.nn.Module,
                        optimizer: torch.optim.Optimizer, rank: int = 0) -> dict:
    """Restore model, EMA, optimizer and RNG (process `rank`'s, when the run had that many
    processes; else the first's) from a checkpoint folder; returns state.json."""
    try:
        state = json.loads((path / "state.json").read_text())
        model.load_state_dict(load_file(str(path / "model.safetensors")))
        ema.load_state_dict(load_file(str(path / "ema.safetensors")))
        _load_optimizer(optimizer, load_file(str(path / "optimizer.safetensors")), state["param_groups"])
        if 0 < rank <= len(state.get("rng_ranks", [])):
            set_rng_state(load_file(str(path / f"rng_rank{rank}.safetensors")), state["rng_ranks"][rank - 1])
        else:
            set_rng_state(load_file(str(path / "rng.safetensors")), state["rng"])
    except (OSError, ValueError, KeyError, SafetensorError, RuntimeError) as e:
        raise CheckpointError(f"{path}: cannot resume from this checkpoint ({type(e).__name__}: {e}); "
                              "delete it to fall back to an older one, or start a new run") from None
    return state
