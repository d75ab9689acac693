"""Where and how fast the model runs: the runtime options every command that runs it shares
(play, eval, distill), declared once here; train.py reads the same five from its
config (train.device, train.precision, train.threads, train.compile, train.channels_last).
Importing this module does not import torch, so a command's --help stays instant."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from dreamcade.dataset.errors import UserError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "no", "bf16")
OPTIONS = ("device", "precision", "threads", "compile", "channels_last")


class DeviceError(UserError, ValueError):
    """A device that is not here, or a runtime option out of its range; the message says what to
    use instead."""


@dataclass(frozen=True)
class Runtime:
    """device: auto (CUDA when torch sees it), cpu or cuda. precision: network autocast, auto =
    bf16 on CUDA and fp32 on the CPU. threads: torch CPU threads, 0 = torch's own choice.
    compile: torch.compile the network (CUDA graphs on CUDA). channels_last: NHWC memory."""

    device: str = "auto"
    precision: str = "auto"
    threads: int = 0
    compile: bool = False
    channels_last: bool = True

    @staticmethod
    def add_options(parser: argparse.ArgumentParser, only: tuple[str, ...] = OPTIONS, **defaults) -> None:
        """The command-line options of `only` (some of OPTIONS), with the defaults given here."""
        d = Runtime(**defaults)
        g = parser.add_argument_group("where and how fast the model runs")
        if "device" in only:
            g.add_argument("--device", choices=DEVICES, default=d.device,
                           help=f"auto: CUDA when torch sees it, else the CPU (default: {d.device})")
        if "precision" in only:
            g.add_argument("--precision", choices=PRECISIONS, default=d.precision,
                           help=f"network autocast: auto = bf16 on CUDA, fp32 on the CPU (default: {d.precision})")
        if "threads" in only:
            g.add_argument("--threads", type=int, default=d.threads,
                           help=f"torch CPU threads, 0: torch's own choice (default: {d.threads})")
        if "compile" in only:
            g.add_argument("--compile", action="store_true", default=d.compile,
                           help="torch.compile the network (on CUDA with CUDA graphs); slow to start")
        if "channels_last" in only:
            g.add_argument("--channels-last", action=argparse.BooleanOptionalAction, default=d.channels_last,
                           help="channels-last (NHWC) memory for the network (default: on)")

    @staticmethod
    def from_args(args: argparse.Namespace) -> Runtime:
        """The options a parser built by add_options read; the ones it lacks keep their defaults."""
        return Runtime(**{k: getattr(args, k) for k in OPTIONS if hasattr(args, k)})

    def check(self) -> None:
        if self.device not in DEVICES:
            raise DeviceError(f"device {self.device!r}: choose one of {', '.join(DEVICES)}")
        if self.precision not in PRECISIONS:
            raise DeviceError(f"precision {self.precision!r}: choose one of {', '.join(PRECISIONS)}")
        if self.threads < 0:
            raise DeviceError(f"threads {self.threads}: 0 (torch's own choice) or more")

    def apply_threads(self) -> None:
        """torch's CPU threads, when asked for."""
        if self.threads > 0:
            import torch

            torch.set_num_threads(self.threads)
