"""Checkpoints, all in safetensors and JSON (nothing is ever unpickled).

- Training state: `<run>/checkpoints/step_XXXXXXXX/` with model, EMA and optimizer tensors and
  `state.json` (step, config, RNG states). It is written to a temporary folder, fsynced, and
  renamed into place, then the `latest` pointer is replaced the same way: a killed run never
  leaves a half-written checkpoint where resuming looks. The newest `keep` are kept.
- The slim model: `<run>/model.safetensors`, the EMA weights with the config and control spec in
  its metadata, which play and eval load to rebuild the model.
- A world folder (dreamcade.files.world) is what travels; dreamcade.files.inference loads it where it loads a run.
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
from dreamcade.dataset.store import software_version
from dreamcade.model.config import Config, ConfigError
from dreamcade.files.config_file import from_dict, to_dict
from dreamcade.model.denoiser import Denoiser

MODEL_FORMAT = "dreamcade.model"
MODEL_VERSION = 1
MODEL_FILE = "model.safetensors"


class CheckpointError(UserError):
    """A checkpoint that cannot be loaded; the message names the file and the fix."""


# -- helpers ---------------------------------------------------------------------------------------

def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)


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


# -- the slim model file -----------------------------------------------------------------------------

def export_model(path: str | Path, model: Denoiser, cfg: Config, step: int, extra: dict[str, str] | None = None) -> Path:
    """Write the slim safetensors model (weights of `model`, normally the EMA) atomically;
    `extra`: more metadata (strings), e.g. how a distilled model was made."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    meta = {"format": MODEL_FORMAT, "format_version": str(MODEL_VERSION), "config": json.dumps(to_dict(cfg)),
            "control_spec": json.dumps(model.spec.to_dict()), "step": str(step),
            "software_version": software_version(), **(extra or {})}
    try:
        _save_tensors(model.state_dict(), tmp, meta)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def resolve_model_path(path: str | Path) -> Path:
    """A run folder or a .safetensors file -> the model file, with a clear error."""
    path = Path(path)
    if path.is_dir():
        if (path / MODEL_FILE).is_file():
            return path / MODEL_FILE
        if (path / "config.json").is_file():
            raise CheckpointError(f"{path}: a world folder, not a run; play or evaluate it, or load it with "
                                  "dreamcade.files.world.load_world")
        raise CheckpointError(f"{path}: no {MODEL_FILE} in this folder; train first "
                              f"(`python train.py --config configs/demo.yaml`) or point at a run folder")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint; pass a run folder (runs/<name>) or its {MODEL_FILE}")
    return path


def load_model(path: str | Path, device: str | torch.device = "cpu",
               expect_spec: ControlSpec | None = None) -> tuple[Denoiser, Config, dict]:
    """Rebuild the model from a slim file (or a run folder); returns (model, config, metadata).
    A world folder is loaded by dreamcade.files.world (and dreamcade.files.inference takes both)."""
    path = resolve_model_path(path)
    check_complete(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError) as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    if meta.get("format") != MODEL_FORMAT:
        raise CheckpointError(f"{path}: not a dreamcade model (metadata 'format' is {meta.get('format')!r})")
    if int(meta.get("format_version", 0)) > MODEL_VERSION:
        raise CheckpointError(f"{path}: made by a newer dreamcade (model format {meta['format_version']}); upgrade")
    try:
        cfg = from_dict(Config, json.loads(meta["config"]), where=f"{path} config")
        cfg.check()
        spec = ControlSpec.from_dict(json.loads(meta["control_spec"]), where=f"{path} control_spec")
    except (ConfigError, SpecError, KeyError, ValueError, TypeError, AttributeError) as e:
        raise CheckpointError(f"{path}: broken metadata: {e}") from None
    check_spec(spec, expect_spec, path)
    model = Denoiser(cfg.model, cfg.diffusion, spec, cfg.data.context)
    try:
        model.load_state_dict(load_file(str(path)))
    except RuntimeError as e:  # weights of another shape than the metadata's config and control spec
        raise CheckpointError(f"{path}: its weights do not fit its own config ({str(e).strip().splitlines()[0][:200]}); "
                              "the file is damaged or was edited: train or export it again") from None
    return model.to(device).eval(), cfg, meta


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
        _write_atomic(tmp / "state.json", json.dumps(state).encode())
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = ckpts / name
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_dir(ckpts)
    _write_atomic(ckpts / "latest", name.encode())
    for old in sorted(p for p in ckpts.glob("step_*") if p.is_dir())[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


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
