"""The configuration schema: one dataclass per component, every field documented where it is
declared (unit, range) and its value rules beside it, in the section's `check()`.

Reading YAML presets and `key.sub=value` overrides strictly: dreamcade/files/config_file.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from dreamcade.dataset.errors import UserError


class ConfigError(UserError, ValueError):
    """A config file or override that cannot be used; the message names the key and the fix."""


def require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass
class DataConfig:
    stores: list[str] = field(default_factory=list)
    """Training stores (`dreamcade data build ...`); `--data` on the command line sets them."""
    context: int = 4
    """L: past frames the model sees, 1 to 16."""
    val_fraction: float = 0.1
    """Share of episodes held out for validation, in [0, 1)."""
    mode: Literal["auto", "ram", "stream"] = "auto"
    """Frames in RAM, streamed from disk, or RAM when they fit."""
    num_workers: int = 0
    """DataLoader worker processes, 0 or more (0: load in the training process)."""
    weighting: Literal["window", "episode"] = "window"
    """Sample windows uniformly, or every episode equally often."""
    skip_damaged: bool = False
    """Leave out episodes that touch a missing or damaged chunk (and say which), instead of
    refusing the data. Every chunk is decoded once at the start to find them."""

    def check(self) -> None:
        require(1 <= self.context <= 16, "data.context must be between 1 and 16")
        require(0 <= self.val_fraction < 1, "data.val_fraction must be in [0, 1)")
        require(self.num_workers >= 0, "data.num_workers must be 0 or more")


@dataclass
class NetworkConfig:
    channels: list[int] = field(default_factory=lambda: [32, 64, 128, 192])
    """UNet width at each resolution level (the frame is halved between levels, so frames of any
    size are padded to multiples of 2 ** (levels - 1) inside the network), positive multiples of
    `groups`; one level at least."""
    blocks: int = 2
    """Residual blocks per level on the way down (one more on the way up), at least 1."""
    attention_levels: list[int] = field(default_factory=lambda: [3])
    """Levels (0 = full resolution, below len(channels)) with a self-attention layer after each block."""
    cond_dim: int = 256
    """Width of the conditioning vector (noise level + context noise level + actions), at least 1."""
    action_dim: int = 64
    """Width of each step's action embedding before it is merged, at least 1."""
    groups: int = 8
    """Group-norm groups, at least 1; every channel count must divide by it."""

    def check(self) -> None:
        require(len(self.channels) >= 1, "model.channels is empty; give one width per level, e.g. [32, 64, 128]")
        require(self.groups >= 1, "model.groups must be at least 1")
        require(all(c > 0 and c % self.groups == 0 for c in self.channels),
                f"model.channels must be positive multiples of model.groups ({self.groups})")
        require(all(0 <= lv < len(self.channels) for lv in self.attention_levels),
                f"model.attention_levels must be level numbers below {len(self.channels)}")
        require(self.blocks >= 1, "model.blocks must be at least 1")
        require(self.cond_dim >= 1 and self.action_dim >= 1, "model.cond_dim and model.action_dim must be at least 1")


@dataclass
class DiffusionConfig:
    sigma_data: float = 0.5
    """Std of the diffused quantity in [-1, 1] pixel units (Karras et al. 2022), positive."""
    p_mean: float = -0.4
    """Mean of ln(sigma) during training."""
    p_std: float = 1.2
    """Std of ln(sigma) during training, positive."""
    sigma_min: float = 2e-3
    """Training sigmas are clipped to [sigma_min, sigma_max]; 0 < sigma_min < sigma_max."""
    sigma_max: float = 20.0
    """Upper clip of the training sigmas."""
    offset_noise: float = 0.3
    """Std of a per-channel constant added to the training noise, 0 or more (0 turns it off)."""
    residual: bool = True
    """Diffuse the change from the last past frame instead of the frame itself: a static pixel
    is then a zero to predict, not a copy through the whole UNet, which learns several times
    faster on games where most of the screen holds still between frames."""
    context_noise_max: float = 0.7
    """Context noise augmentation, 0 or more, in [-1, 1] pixel units: past frames get Gaussian
    noise of a level drawn in [0, context_noise_max] per sample, and the network is told the
    level. 0 turns it off."""
    motion_weight: float = 0.0
    """Extra loss weight, 0 or more, on the pixels that change from the last past frame to the
    next by more than 4 of 255 levels: such a pixel counts 1 + motion_weight times. On games
    where a small object moves by itself over a still screen (Breakout's ball) the moving pixels
    are a fraction of a percent of the loss; 0 turns it off."""
    action_drop: float = 0.0
    """Share of the training windows whose input is dropped, in [0, 1): their action term of the
    conditioning is zero, so the model also learns the next frame without knowing the keys, the
    second half of what sampler.guidance needs. 0 turns it off."""

    def check(self) -> None:
        require(self.motion_weight >= 0, "diffusion.motion_weight must be 0 or more")
        require(0 <= self.action_drop < 1, "diffusion.action_drop must be in [0, 1) (0: off)")
        require(self.sigma_data > 0 and self.p_std > 0, "diffusion.sigma_data and diffusion.p_std must be positive")
        require(0 < self.sigma_min < self.sigma_max, "diffusion needs 0 < sigma_min < sigma_max")
        require(self.offset_noise >= 0, "diffusion.offset_noise must be 0 or more")
        require(self.context_noise_max >= 0, "diffusion.context_noise_max must be >= 0")


STEPS = (1, 10)  # sampler steps per frame, lowest and highest
METHODS = ("euler", "heun")


@dataclass
class SamplerConfig:
    steps: int = 6
    """Denoising steps per frame, 1 to 10 (STEPS). Fewer steps give the mean of what may come
    next, a little blurred, and on a view that moves the blur compounds from frame to frame
    (docs/recipe.md#sampler-steps: 3 Euler steps melted a maze within 100 steps)."""
    method: Literal["euler", "heun"] = "heun"
    """Euler (one network call a step) or Heun (two, but the last: 11 in 6 steps). Heun keeps a
    moving view as sharp as the recording where Euler, even in 10 steps, blurs it; in 3 steps it
    fills the frame with noise, and on a fixed screen of few colours its grain moves the colours
    out of the health band, so the fixed-screen presets keep Euler
    (docs/recipe.md#sampler-method)."""
    sigma_min: float = 2e-3
    """Lowest noise level of the Karras schedule; 0 < sigma_min < sigma_max."""
    sigma_max: float = 5.0
    """Highest noise level of the schedule (where sampling starts)."""
    rho: float = 7.0
    """Karras schedule curvature, positive."""
    churn: float = 0.0
    """Stochastic churn S_churn, 0 or more (0 = deterministic given the noise)."""
    context_noise: float = 0.1
    """Noise level given to the past frames when generating, 0 or more; the model applies at
    most its diffusion.context_noise_max."""
    hold_levels: float = 3.0
    """Pixels of a generated frame within this many 8-bit levels of the same pixel in the last
    frame keep the last frame's value, 0 or more (0: off). Sampling leaves errors of one to three
    levels that round differently in every frame, and without it a still picture flickers
    (docs/recipe.md has the measurement)."""
    guidance: float = 1.0
    """Guidance on the input (classifier-free guidance), 1 or more (1: off): each step's denoised
    frame is D(without the keys) + guidance * (D(with them) - D(without)), the change the keys
    make pushed further. Needs a model trained with diffusion.action_drop > 0; costs two
    network calls a step (one batch of twice the size)."""
    guidance_rescale: float = 0.0
    """With guidance above 1, the share in [0, 1] of each guided step's frame that is scaled back
    to the spread (standard deviation) of the frame with the keys (0: off): Lin et al. 2024's
    rescale, measured on the screen demo in docs/recipe.md#rescaled-guidance."""

    def check(self) -> None:
        check_steps(self.steps)
        check_guidance(self.guidance)
        check_guidance_rescale(self.guidance_rescale)
        check_method(self.method)
        require(0 < self.sigma_min < self.sigma_max, "sampler needs 0 < sigma_min < sigma_max")
        require(self.rho > 0 and self.churn >= 0, "sampler.rho must be positive and sampler.churn 0 or more")
        check_context_noise(self.context_noise)
        check_hold_levels(self.hold_levels)


# The sampler settings' rules, one place for the config file and every command's options
# (--steps, --method, --context-noise, --hold-levels of play and eval); each names the option it checks.

def check_steps(steps: int, option: str = "sampler.steps") -> int:
    require(STEPS[0] <= steps <= STEPS[1], f"{option} {steps}: sampler steps must be between {STEPS[0]} and {STEPS[1]}")
    return steps


def check_context_noise(level: float, option: str = "sampler.context_noise") -> float:
    require(level >= 0, f"{option} {level:g}: the context noise level must be 0 or more")
    return level


def check_hold_levels(levels: float, option: str = "sampler.hold_levels") -> float:
    require(levels >= 0, f"{option} {levels:g}: must be 0 (off) or more")
    return levels


def check_guidance(guidance: float, option: str = "sampler.guidance") -> float:
    require(math.isfinite(guidance) and guidance >= 1,
            f"{option} {guidance:g}: guidance on the input must be a number, 1 (off) or more")
    return guidance


def check_guidance_rescale(share: float, option: str = "sampler.guidance_rescale") -> float:
    require(0 <= share <= 1, f"{option} {share:g}: the share of guidance rescaled must be in [0, 1] (0: off)")
    return share


def guided(guidance: float, rescale: float = 0.0) -> str:
    """", guidance 2 on the input" (", rescaled 0.7" after it where guidance_rescale is above 0)
    for a guidance above 1, else "": how the card, the report and a student's card name it after
    the sampler's steps and method."""
    if guidance == 1:
        return ""
    return f", guidance {guidance:g} on the input" + (f", rescaled {rescale:g}" if rescale > 0 else "")


def check_guided(guidance: float, action_drop: float, option: str = "sampler.guidance") -> None:
    """Guidance above 1 only for a model that learned the frame without the input it guides from."""
    require(guidance == 1 or action_drop > 0,
            f"{option} {guidance:g}: guidance needs a model trained with diffusion.action_drop above 0, which "
            f"learns the frame without the input to guide from (this one: {action_drop:g}); use {option} 1, "
            "or train with diffusion.action_drop=0.1")


def context_noise_used(level: float, maximum: float) -> float:
    """The context-noise level a model applies: the asked level clamped to [0, the largest level
    it was trained with (diffusion.context_noise_max)]."""
    return min(max(float(level), 0.0), maximum)


def check_method(method: str, option: str = "sampler.method") -> str:
    require(method in METHODS, f"{option} {method!r}: the sampler method must be one of {', '.join(METHODS)}")
    return method


def sampler_settings(base: SamplerConfig, steps: int | None = None, context_noise: float | None = None,
                     hold_levels: float | None = None, method: str | None = None,
                     guidance: float | None = None, guidance_rescale: float | None = None) -> SamplerConfig:
    """A copy of `base` with the given command-line options (None keeps the base's), checked."""
    out = replace(base)
    if method is not None:
        out.method = check_method(method, "--method")
    if hold_levels is not None:
        out.hold_levels = float(check_hold_levels(hold_levels, "--hold-levels"))
    if steps is not None:
        out.steps = check_steps(steps, "--steps")
    if context_noise is not None:
        out.context_noise = check_context_noise(context_noise, "--context-noise")
    if guidance is not None:
        out.guidance = float(check_guidance(guidance, "--guidance"))
    if guidance_rescale is not None:
        out.guidance_rescale = float(check_guidance_rescale(guidance_rescale, "--guidance-rescale"))
    return out


@dataclass
class UpsamplerConfig:
    """The second stage of a two-stage world (model/upsampler.py): a diffusion upsampler that
    makes the full-size frame from the dynamics model's small one. The run's data is at the full
    size; the dynamics model trains on it shrunk `scale` times (area resize, as `data build
    --size` does), then the upsampler trains on random crops of the full-size frames."""

    scale: int = 1
    """How many times larger the frame the world shows is than the one the dynamics model makes
    (a whole number: 1 = one stage, no upsampler). The data's width and height must be whole
    multiples of it."""
    channels: list[int] = field(default_factory=lambda: [16, 32, 64])
    """UNet width at each level (no attention: fully convolutional), multiples of `groups`."""
    blocks: int = 1
    """Residual blocks per level on the way down, at least 1."""
    cond_dim: int = 128
    """Width of the conditioning vector (noise level + the low frame's noise level), at least 1."""
    groups: int = 8
    """Group-norm groups, at least 1."""
    sigma_data: float = 0.25
    """Std of the diffused difference from the low frame widened bicubically, positive."""
    p_mean: float = -0.4
    """Mean of ln(sigma) during training."""
    p_std: float = 1.2
    """Std of ln(sigma) during training, positive."""
    cond_noise_max: float = 0.1
    """Conditioning augmentation, 0 or more, in [-1, 1] pixel units: the low frame gets Gaussian
    noise of a level drawn in [0, cond_noise_max] per sample, told to the network, so a generated
    low frame is not a stranger to it. 0 turns it off."""
    crop: int = 32
    """Side of the square crops of the full-size frames it trains on, a multiple of `scale`."""
    motion_weight: float = 10.0
    """Loss weight of the pixels that move, 0 or more: a full-size pixel that changed by more than
    4 levels from the frame before counts 1 + motion_weight times (diffusion.motion_weight's
    counterpart), so a small moving object (Breakout's ball) is drawn from the dim blob the small
    frame holds of it. 0 turns it off (docs/recipe.md#keeping-the-ball)."""
    motion_crops: float = 0.5
    """Share of the crops placed over a pixel that moved (where the frame has one), in [0, 1]: a
    small moving object is otherwise in few of them. 0: every crop at random."""
    steps: int = 5000
    """Optimizer steps of its training (after the dynamics model's train.steps), at least 1."""
    batch_size: int = 32
    """Crops per optimizer step, at least 1."""
    sampler_steps: int = 1
    """Sampler steps per frame when it draws a frame, 1 to 10."""
    method: Literal["euler", "heun"] = "euler"
    """Sampler method of its steps."""

    def check(self) -> None:
        require(isinstance(self.scale, int) and self.scale >= 1, "upsampler.scale must be a whole number, 1 (off) or more")
        if self.scale == 1:
            return
        NetworkConfig(channels=self.channels, blocks=self.blocks, attention_levels=[], cond_dim=self.cond_dim,
                      action_dim=1, groups=self.groups).check()
        require(self.sigma_data > 0 and self.p_std > 0, "upsampler.sigma_data and upsampler.p_std must be positive")
        require(self.cond_noise_max >= 0, "upsampler.cond_noise_max must be 0 or more")
        require(self.motion_weight >= 0, "upsampler.motion_weight must be 0 or more")
        require(0 <= self.motion_crops <= 1, "upsampler.motion_crops must be in [0, 1]")
        require(self.crop >= self.scale and self.crop % self.scale == 0,
                f"upsampler.crop must be a multiple of upsampler.scale ({self.scale})")
        require(self.steps >= 1 and self.batch_size >= 1, "upsampler.steps and upsampler.batch_size must be at least 1")
        check_steps(self.sampler_steps, "upsampler.sampler_steps")
        check_method(self.method, "upsampler.method")


@dataclass
class OptimConfig:
    lr: float = 1e-4
    """AdamW learning rate after warm-up, positive."""
    weight_decay: float = 1e-2
    """AdamW weight decay of the weight matrices and kernels (not biases or norms), 0 or more."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    """AdamW betas, two numbers in [0, 1)."""
    eps: float = 1e-8
    """AdamW epsilon, positive."""
    warmup_steps: int = 100
    """Linear learning-rate warm-up, in optimizer steps, 0 or more."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this, 0 or more (0 turns clipping off)."""
    ema_decay: float = 0.999
    """EMA of the weights, used for evaluation, samples and the exported model; in [0, 1)."""

    def check(self) -> None:
        require(self.lr > 0 and self.eps > 0, "optim.lr and optim.eps must be positive")
        require(self.weight_decay >= 0, "optim.weight_decay must be 0 or more")
        require(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), "optim.betas must be two numbers in [0, 1)")
        require(self.warmup_steps >= 0, "optim.warmup_steps must be 0 or more")
        require(self.grad_clip >= 0, "optim.grad_clip must be 0 (off) or more")
        require(0 <= self.ema_decay < 1, "optim.ema_decay must be in [0, 1)")


@dataclass
class TrainConfig:
    steps: int = 10000
    """Optimizer steps in all, at least 1."""
    batch_size: int = 32
    """Windows per optimizer step on each device (times grad_accum micro-batches), at least 1."""
    grad_accum: int = 1
    """Micro-batches accumulated per optimizer step, at least 1."""
    seed: int = 0
    """Seed of the weights, the data order (the same in every process) and the noise (offset by
    the process rank)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto = CUDA when torch sees it, else the CPU."""
    precision: Literal["auto", "no", "bf16"] = "auto"
    """Autocast around the network only (preconditioning, loss and solver stay fp32):
    auto = bf16 on CUDA, fp32 on the CPU."""
    channels_last: bool = True
    """channels_last memory format for the network."""
    compile: bool = False
    """torch.compile the network (CUDA; slow to start)."""
    threads: int = 0
    """torch CPU threads, 0 or more (0: torch's default)."""
    log_every: int = 10
    """Steps between log lines (stats.jsonl, the progress bar), at least 1."""
    eval_every: int = 500
    """Steps between validation figures, 0 or more (0 = only at the end)."""
    eval_batches: int = 4
    """Validation batches per evaluation, at least 1."""
    sample_every: int = 1000
    """Steps between sample grids and a short rollout video in the run folder, 0 or more (0 = never)."""
    rollout_frames: int = 32
    """Frames of the sample rollout video, at least 1."""
    save_every: int = 500
    """Steps between checkpoints, 0 or more (0 = only at the end)."""
    keep_checkpoints: int = 3
    """Newest checkpoints kept, at least 1."""
    log_windows: bool = False
    """Each process writes the window indices of every batch it trains on to
    <run>/windows/rank<R>.jsonl (to check what each process saw)."""

    def check(self) -> None:
        require(self.steps >= 1 and self.batch_size >= 1 and self.grad_accum >= 1,
                "train.steps, train.batch_size and train.grad_accum must be at least 1")
        require(self.keep_checkpoints >= 1, "train.keep_checkpoints must be at least 1")
        require(self.log_every >= 1, "train.log_every must be at least 1 (steps between log lines)")
        require(self.eval_every >= 0, "train.eval_every must be 0 (only at the end) or a number of steps")
        require(self.eval_batches >= 1, "train.eval_batches must be at least 1")
        require(self.sample_every >= 0, "train.sample_every must be 0 (never) or a number of steps")
        require(self.rollout_frames >= 1, "train.rollout_frames must be at least 1")
        require(self.save_every >= 0, "train.save_every must be 0 (only at the end) or a number of steps")
        require(self.threads >= 0, "train.threads must be 0 (torch's default) or more")


@dataclass
class LogConfig:
    wandb: Literal["off", "offline", "online"] = "off"
    """wandb mirror of stats.jsonl: off unless asked for."""
    project: str = "dreamcade"
    """wandb project name."""

    def check(self) -> None:
        pass


@dataclass
class Config:
    name: str = "run"
    """Run name, a plain folder name: everything goes to <out_dir>/<name>/."""
    out_dir: str = "runs"
    """Folder that holds the runs."""
    data: DataConfig = field(default_factory=DataConfig)
    model: NetworkConfig = field(default_factory=NetworkConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    upsampler: UpsamplerConfig = field(default_factory=UpsamplerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.name

    def check(self) -> None:
        """Every section's rules, then the ones across sections."""
        require(bool(self.name) and "/" not in self.name, "name must be a plain folder name")
        for section in (self.data, self.model, self.diffusion, self.sampler, self.upsampler, self.optim, self.train, self.log):
            section.check()
        check_guided(self.sampler.guidance, self.diffusion.action_drop)
