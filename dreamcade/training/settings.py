"""What a distillation does and how much of it: DistillSettings. Each field is also an option of
`dreamcade distill`, declared the way eval's DriftSettings are (eval.settings.option): its
default, help and rule live in the field, and the command line is built from them. No torch here."""

from __future__ import annotations

from dataclasses import dataclass, fields

from dreamcade.eval.settings import option
from dreamcade.model.config import STEPS, ConfigError


@dataclass
class DistillSettings:
    steps: int = option(1, "sampler steps of the student: at least 1 and fewer than the teacher's")
    iterations: int = option(0, "optimizer steps; an iteration costs about two training steps (the teacher's "
                             "sampler, then the student's forward and backward)", at_least=0,
                             shown="0, a seventh of the teacher's train.steps: under a third of its time")
    lr: float = option(2e-4, "AdamW learning rate, after a 20-step warm-up")
    batch_size: int = option(0, "windows per step", at_least=0, shown="0, the teacher's train.batch_size")
    seed: int = option(0, "seed of the data order and the noise")
    rollout: int = option(1, "frames of the teacher's session each iteration follows: the student's frames fed "
                          "back to it and the teacher's to the teacher, from the same past and noise; an "
                          "iteration costs about this many times more", at_least=1)
    init: str = option("", "start from this student of the same teacher (a run folder) instead of a copy of the "
                       "teacher, and take its upsampler as it is", metavar="RUN", shown="none")

    def check(self, teacher_steps: int) -> None:
        if not STEPS[0] <= self.steps < teacher_steps:
            raise ConfigError(f"--steps {self.steps}: the student needs at least {STEPS[0]} sampler step and fewer "
                              f"than the teacher's {teacher_steps}")
        if self.iterations < 0 or self.batch_size < 0 or not self.lr > 0:
            raise ConfigError("--iterations and --batch-size must be 0 (the default) or more, and --lr positive")
        if self.rollout < 1:
            raise ConfigError(f"--rollout {self.rollout}: at least 1 (the next frame only)")

    @classmethod
    def from_args(cls, args) -> DistillSettings:
        return cls(**{f.name: getattr(args, f.name) for f in fields(cls)})
