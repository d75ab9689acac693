"""Typed configuration: one dataclass per component, YAML presets in configs/, and
`key.sub=value` overrides. Unknown keys and wrong types are errors, raised before any work."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml


class ConfigError(ValueError):
    """A config file or override that cannot be used; the message names the key and the fix."""


@dataclass
class DataConfig:
    stores: list[str] = field(default_factory=list)
    """Training stores (`python -m dataset build ...`); `--data` on the command line sets them."""
    context: int = 4
    """L: past frames the model sees, 1 to 16."""
    val_fraction: float = 0.1
    """Share of episodes held out for validation, in [0, 1)."""
    mode: Literal["auto", "ram", "stream"] = "auto"
    """Frames in RAM, streamed from disk, or RAM when they fit."""
    num_workers: int = 0
    """DataLoader worker processes (0: load in the training process)."""
    weighting: Literal["window", "episode"] = "window"
    """Sample windows uniformly, or every episode equally often."""
    skip_damaged: bool = False
    """Leave out episodes that touch a missing or damaged chunk (and say which), instead of
    refusing the data. Every chunk is decoded once at the start to find them."""


@dataclass
class NetworkConfig:
    channels: list[int] = field(default_factory=lambda: [32, 64, 128, 192])
    """UNet width at each resolution level (the frame is halved between levels)."""
    blocks: int = 2
    """Residual blocks per level on the way down (one more on the way up)."""
    attention_levels: list[int] = field(default_factory=lambda: [3])
    """Levels (0 = full resolution) with a self-attention layer after each block."""
    cond_dim: int = 256
    """Width of the conditioning vector (noise level + context noise level + actions)."""
    action_dim: int = 64
    """Width of each step's action embedding before it is merged."""
    groups: int = 8
    """Group-norm groups; every channel count must divide by it."""


@dataclass
class DiffusionConfig:
    sigma_data: float = 0.5
    """Std of the frames in [-1, 1] (Karras et al. 2022)."""
    p_mean: float = -0.4
    """Mean of log sigma during training."""
    p_std: float = 1.2
    """Std of log sigma during training."""
    sigma_min: float = 2e-3
    """Training sigmas are clipped to [sigma_min, sigma_max]."""
    sigma_max: float = 20.0
    offset_noise: float = 0.3
    """Std of a per-channel constant added to the training noise (0 turns it off)."""
    residual: bool = True
    """Diffuse the change from the last past frame instead of the frame itself: a static pixel
    is then a zero to predict, not a copy through the whole UNet, which learns several times
    faster on games where most of the screen holds still between frames."""
    context_noise_max: float = 0.7
    """Context noise augmentation: past frames get Gaussian noise of a level drawn in
    [0, context_noise_max] per sample, and the network is told the level. 0 turns it off."""


@dataclass
class SamplerConfig:
    steps: int = 3
    """Denoising steps per frame, 1 to 10."""
    method: Literal["euler", "heun"] = "euler"
    sigma_min: float = 2e-3
    sigma_max: float = 5.0
    rho: float = 7.0
    """Karras schedule curvature."""
    churn: float = 0.0
    """Stochastic churn S_churn (0 = deterministic given the noise)."""
    context_noise: float = 0.1
    """Noise level given to the past frames when generating (at most context_noise_max)."""


@dataclass
class OptimConfig:
    lr: float = 1e-4
    weight_decay: float = 1e-2
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    eps: float = 1e-8
    warmup_steps: int = 100
    """Linear learning-rate warm-up, in optimizer steps."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this (0 turns clipping off)."""
    ema_decay: float = 0.999
    """EMA of the weights, used for evaluation, samples and the exported model."""


@dataclass
class TrainConfig:
    steps: int = 10000
    """Optimizer steps in all."""
    batch_size: int = 32
    """Windows per optimizer step on each device (times grad_accum micro-batches)."""
    grad_accum: int = 1
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "no", "bf16"] = "auto"
    """Autocast around the network only (preconditioning, loss and solver stay fp32):
    auto = bf16 on CUDA, fp32 on the CPU."""
    channels_last: bool = True
    compile: bool = False
    """torch.compile the network (CUDA; slow to start)."""
    threads: int = 0
    """torch CPU threads (0: torch's default)."""
    log_every: int = 10
    eval_every: int = 500
    """Steps between validation figures (0 = only at the end)."""
    eval_batches: int = 4
    sample_every: int = 1000
    """Steps between sample grids and a short rollout video in the run folder (0 = never)."""
    rollout_frames: int = 32
    save_every: int = 500
    """Steps between checkpoints (0 = only at the end)."""
    keep_checkpoints: int = 3


@dataclass
class LogConfig:
    wandb: Literal["off", "offline", "online"] = "off"
    project: str = "dreamcade"


@dataclass
class Config:
    name: str = "run"
    """Run name: everything goes to <out_dir>/<name>/."""
    out_dir: str = "runs"
    data: DataConfig = field(default_factory=DataConfig)
    model: NetworkConfig = field(default_factory=NetworkConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name


# -- strict conversion -----------------------------------------------------------------------------

def from_dict(cls, data: dict, where: str = "config", prefix: str = ""):
    """Build dataclass `cls` from a dict, refusing unknown keys and values of the wrong type.
    Errors read "<where>: <prefix.key>: what is wrong"."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {prefix or 'the config'}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise ConfigError(f"{where}: {prefix + ': ' if prefix else ''}unknown key {unknown[0]!r}; "
                          f"valid keys: {', '.join(names)}")
    return cls(**{k: _convert(hints[k], v, where, f"{prefix}.{k}" if prefix else k) for k, v in data.items()})


def _convert(tp, value, file: str, key: str):
    where = f"{file}: {key}"
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, file, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, file, key)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_convert(args[0], v, file, f"{key}[{i}]") for i, v in enumerate(value)]
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads 1e-3 as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    raise ConfigError(f"{where}: unsupported type {tp}")


def to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def apply_override(data: dict, text: str) -> None:
    """Apply `a.b=value` (value parsed as YAML) to a config dict, checking the key exists."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {text!r}: expected KEY=VALUE, e.g. train.steps=100")
    parts = key.strip().split(".")
    cls, node = Config, data
    for i, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            prefix = ".".join(parts[:i]) or "the config"
            raise ConfigError(f"override {text!r}: {prefix} has no key {part!r}; valid keys: "
                              f"{', '.join(fields)}")
        tp = typing.get_type_hints(cls)[part]
        if i == len(parts) - 1:
            if dataclasses.is_dataclass(tp):
                raise ConfigError(f"override {text!r}: {key} is a section; set one of its keys")
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                raise ConfigError(f"override {text!r}: the value is not valid YAML") from None
            _convert(tp, value, f"override {text!r}", key)  # blame the override, not the file
            node[part] = value
        else:
            if not dataclasses.is_dataclass(tp):
                raise ConfigError(f"override {text!r}: {'.'.join(parts[:i + 1])} is not a section")
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {text!r}: {'.'.join(parts[:i + 1])} in the config file is "
                                  f"{node!r}, not a section of keys")
            cls = tp


def load_config(path: str | Path | None, overrides: list[str] = ()) -> Config:
    """A preset YAML file (or the defaults when None) plus overrides, checked strictly."""
    data: dict = {}
    where = "config"
    if path is not None:
        path = Path(path)
        if not path.is_file():
            presets = sorted(p.stem for p in Path("configs").glob("*.yaml"))
            raise ConfigError(f"{path}: no such config file (presets: {', '.join(presets) or 'none found'})")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"{path}: cannot be read ({e})") from None
        where = str(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of sections (data:, model:, train: ...), got a "
                              f"YAML {type(data).__name__}; see configs/tiny.yaml")
    for text in overrides:
        apply_override(data, text)
    cfg = from_dict(Config, data, where)
    check(cfg)
    return cfg


def check(cfg: Config) -> None:
    """Value checks that types alone do not catch."""
    m, d, s = cfg.model, cfg.data, cfg.sampler
    rules = [
        (1 <= d.context <= 16, "data.context must be between 1 and 16"),
        (0 <= d.val_fraction < 1, "data.val_fraction must be in [0, 1)"),
        (len(m.channels) >= 1, "model.channels is empty; give one width per level, e.g. [32, 64, 128]"),
        (m.groups >= 1, "model.groups must be at least 1"),
        (all(c > 0 and c % max(1, m.groups) == 0 for c in m.channels),
         f"model.channels must be positive multiples of model.groups ({m.groups})"),
        (all(0 <= lv < len(m.channels) for lv in m.attention_levels),
         f"model.attention_levels must be level numbers below {len(m.channels)}"),
        (m.blocks >= 1, "model.blocks must be at least 1"),
        (1 <= s.steps <= 10, "sampler.steps must be between 1 and 10"),
        (0 < s.sigma_min < s.sigma_max, "sampler needs 0 < sigma_min < sigma_max"),
        (cfg.diffusion.context_noise_max >= 0, "diffusion.context_noise_max must be >= 0"),
        (cfg.train.steps >= 1 and cfg.train.batch_size >= 1 and cfg.train.grad_accum >= 1,
         "train.steps, train.batch_size and train.grad_accum must be at least 1"),
        (cfg.train.keep_checkpoints >= 1, "train.keep_checkpoints must be at least 1"),
        (cfg.train.log_every >= 1, "train.log_every must be at least 1 (steps between log lines)"),
        (cfg.train.eval_every >= 0, "train.eval_every must be 0 (never) or a number of steps"),
        (cfg.train.eval_batches >= 1, "train.eval_batches must be at least 1"),
        (cfg.train.sample_every >= 0, "train.sample_every must be 0 (never) or a number of steps"),
        (cfg.train.rollout_frames >= 1, "train.rollout_frames must be at least 1"),
        (cfg.train.save_every >= 0, "train.save_every must be 0 (only at the end) or a number of steps"),
        (cfg.train.threads >= 0, "train.threads must be 0 (torch's default) or more"),
        (cfg.data.num_workers >= 0, "data.num_workers must be 0 or more"),
        (cfg.optim.lr > 0, "optim.lr must be positive"),
        (cfg.optim.warmup_steps >= 0, "optim.warmup_steps must be 0 or more"),
        (cfg.optim.grad_clip >= 0, "optim.grad_clip must be 0 (off) or more"),
        (0 <= cfg.optim.ema_decay < 1, "optim.ema_decay must be in [0, 1)"),
        (bool(cfg.name) and "/" not in cfg.name, "name must be a plain folder name"),
    ]
    for ok, msg in rules:
        if not ok:
            raise ConfigError(msg)
