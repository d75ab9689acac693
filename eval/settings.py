"""What an evaluation measures and how much of it: DriftSettings. Each field is also an option of
`dreamcade eval drift` and `sweep` (--horizon for horizon, ...): its default, help and rule live in
the field, and the command line is built from them."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, Field, dataclass, field, fields

from dreamcade.eval import EvalError


def floats(text: str) -> list[float]:
    """"30,25,20" -> [30.0, 25.0, 20.0] (an option's type)."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None


def ints(text: str) -> list[int]:
    """"1,3" -> [1, 3] (an option's type)."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole numbers separated by commas, got {text!r}") from None


def names(text: str) -> list[str]:
    """"euler,heun" -> ["euler", "heun"] (an option's type)."""
    return [x.strip() for x in text.split(",") if x.strip()]


def option(default, help: str, at_least: int | None = None, metavar: str | None = None, parse=None,
           flag: str | None = None, shown: str | None = None):
    """A field that is an option: `help` (the default is added to it, or `shown` in its place),
    the smallest value allowed, the metavar and type of the option; `flag` makes a True default a
    switch that turns it off. The one way a command's settings are declared (eval's, distill's)."""
    meta = {"help": help, "at_least": at_least, "metavar": metavar, "parse": parse, "flag": flag, "shown": shown}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DriftSettings:
    """What `dreamcade eval drift` measures and how much of it; each field is an option."""

    horizon: int = option(1000, "steps generated per rollout, and frames measured per session episode", at_least=1)
    episodes: int = option(8, "held-out episodes rolled out, the longest ones", at_least=1)
    psnr_thresholds: list[float] = option([30.0, 25.0, 20.0], "report the step at which PSNR falls below each",
                                          metavar="DB,...", parse=floats)
    ssim_thresholds: list[float] = option([0.9, 0.8, 0.7], "report the step at which SSIM falls below each",
                                          metavar="S,...", parse=floats)
    chunks: int = option(10, "the horizon is cut into this many chunks for the drift score", at_least=1)
    health_window: int = option(100, "steps per window of the healthy horizon: each window's mean health "
                                "must stay in the band that windows of real frames occupy", at_least=1)
    windows: int = option(512, "held-out windows for the one-step figures", at_least=1)
    bank: int = option(2000, "training frames in the nearest-frame bank and the colour reference", at_least=1)
    idm_steps: int = option(600, "training steps of the action classifier, batch 64", at_least=1)
    idm_pairs: int = option(20000, "most real transitions the action classifier trains and is checked on", at_least=1)
    batch: int = option(16, "episodes rolled out together", at_least=1)
    seed: int = option(0, "seed of the sampler noise and the classifier")
    progress: bool = option(True, "no progress bars", flag="--quiet")

    @property
    def chunk(self) -> int:
        """Frames per drift chunk."""
        return max(1, -(-self.horizon // max(1, self.chunks)))  # ceil(horizon / chunks)

    def check(self) -> DriftSettings:
        """Every field within its rule; EvalError names the option."""
        for f in fields(self):
            low = f.metadata["at_least"]
            if low is not None and getattr(self, f.name) < low:
                raise EvalError(f"{option_name(f)} must be at least {low}")
        return self

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DriftSettings:
        """The settings of a parsed command line (see `add_options`), checked."""
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)}).check()


def option_name(f: Field) -> str:
    """--idm-steps for idm_steps."""
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def default_of(f: Field):
    return f.default if f.default is not MISSING else f.default_factory()


def shown(value) -> str:
    """A default as the command line spells it: 30,25,20 for a list."""
    return ",".join(f"{x:g}" for x in value) if isinstance(value, list) else str(value)


def add_options(parser: argparse.ArgumentParser, settings: type | None = None, **defaults) -> None:
    """One option per field of a settings dataclass declared with option() (DriftSettings unless
    told; distill's DistillSettings too); `defaults` overrides fields' defaults for this command."""
    for f in fields(settings or DriftSettings):
        m, default = f.metadata, defaults.get(f.name, default_of(f))
        if m["flag"]:
            parser.add_argument(m["flag"], dest=f.name, action="store_false", help=m["help"])
            continue
        parser.add_argument(option_name(f), type=m["parse"] or type(default), default=default,
                            metavar=m["metavar"], help=f"{m['help']} (default: {m['shown'] or shown(default)})")
