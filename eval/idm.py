"""Action following: a small inverse-dynamics model (IDM), trained on real recordings to tell
which action was held between two frames, then asked whether generated transitions show the
action that was given.

Its accuracy on real held-out transitions is the ceiling (what a perfect world model would
score: some actions have no visible effect in some states), and the share of the most common
action is chance. Exclusive specs (discrete game actions) are one classification; other specs
score each binary control separately (the mean of the per-control accuracies) and keep only the
controls it reads on real frames (see `train_idm`); continuous controls are not scored.

The classifier sees frames brought down to at most `WORKING_SIDE` pixels on their long side
(area interpolation, aspect kept), real and generated alike, so its cost does not grow with the
frame size. Where its ceiling is not clearly above chance (see `unreadable`), it cannot read the
actions on real frames, and action following is unmeasured rather than a figure.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from dreamcade.dataset.controls import BINARY, ControlSpec
from dreamcade.dataset.pixels import hwc_to_model
from dreamcade.eval import EvalError


WORKING_SIDE = 32
"""The most pixels on the long side of what the classifier sees: larger frames are brought down
to it (area interpolation, aspect kept), so a 64x64 or 128x72 store costs what a 32x32 one does."""


def working_size(h: int, w: int, side: int = WORKING_SIDE) -> tuple[int, int]:
    """(h, w) of the classifier's input for frames of h x w: unchanged up to `side` on the long
    side, else scaled down to `side` there, the short side rounded (at least 1)."""
    if max(h, w) <= side:
        return h, w
    scale = side / max(h, w)
    return max(1, round(h * scale)), max(1, round(w * scale))


class InverseDynamics(nn.Module):
    """(frame t, frame t+1) -> logits over the actions: both frames at the working size (see
    `working_size`), then three 3x3 convolutions over the two frames and their difference, and
    average and max pooling (small moving objects count)."""

    def __init__(self, n_out: int, width: int = 32) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(9, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.SiLU())
        self.head = nn.Linear(4 * width, n_out)

    def inputs(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """before, after: uint8 [B, H, W, 3] -> what the convolutions see, float [B, 9, h, w]
        in [-2, 2]: both frames at the working size and their difference."""
        a, b = (hwc_to_model(x, x.device) for x in (before, after))  # float [B, 3, H, W] in [-1, 1]
        size = working_size(*a.shape[-2:])
        if size != tuple(a.shape[-2:]):
            a, b = (F.interpolate(x, size=size, mode="area") for x in (a, b))  # [B, 3, h, w]
        return torch.cat([a, b, b - a], 1)

    def forward(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """before, after: uint8 [B, H, W, 3] -> logits [B, n_out]."""
        h = self.convs(self.inputs(before, after))  # [B, 2w, h/4, w/4]
        return self.head(torch.cat([h.mean((2, 3)), h.amax((2, 3))], 1))

    @torch.no_grad()
    def keep(self, outputs: list[int]) -> None:
        """Keep only these of its outputs (the same logits as before for them)."""
        head = nn.Linear(self.head.in_features, len(outputs)).to(self.head.weight.device)
        head.weight.copy_(self.head.weight[outputs])
        head.bias.copy_(self.head.bias[outputs])
        self.head = head


@dataclass
class ActionLabels:
    """How a spec's action rows become IDM targets."""

    spec: ControlSpec
    used: tuple[int, ...] | None = None
    """The binary controls scored (see `for_data`); None: all of them."""

    @classmethod
    def for_data(cls, spec: ControlSpec, actions: np.ndarray) -> ActionLabels:
        """Labels that score, of a spec that is not exclusive, only the binary controls that are
        held in some of `actions` (the classifier's training rows) and not in others: a key never
        pressed (or never let go) tells nothing about the frames, and would only add a free right
        answer to the classifier, to chance and to every generated frame alike."""
        if spec.exclusive:
            return cls(spec)
        held = np.asarray(actions) > 0.5
        return cls(spec, tuple(i for i, c in enumerate(spec.controls)
                               if c.kind == BINARY and 0 < held[:, i].sum() < len(held)))

    @property
    def columns(self) -> list[int]:
        """The scored action columns: all of an exclusive spec, else the binary controls (those
        in `used`, when given)."""
        return [i for i, c in enumerate(self.spec.controls)
                if c.kind == BINARY and (self.used is None or i in self.used)]

    @property
    def n_out(self) -> int:
        return len(self.columns)

    def targets(self, actions: np.ndarray) -> torch.Tensor:
        """Exclusive: class index [N] (long); else 0/1 per scored control [N, K] (float)."""
        a = torch.as_tensor(np.asarray(actions, np.float32))[:, self.columns]
        return a.argmax(1) if self.spec.exclusive else (a > 0.5).float()

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.spec.exclusive:
            return F.cross_entropy(logits, y)
        return F.binary_cross_entropy_with_logits(logits, y)

    def correct(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per transition: 1/0 (exclusive), or the share of controls predicted right, [N]."""
        if self.spec.exclusive:
            return (logits.argmax(1) == y).float()
        return self.hits(logits, y).mean(1)

    def hits(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Not exclusive: whether each control was predicted right, float [N, K]."""
        return ((logits > 0) == (y > 0.5)).float()

    @property
    def keys(self) -> list[str]:
        """The names of the scored controls (of an exclusive spec: its actions)."""
        return [self.spec.names[i] for i in self.columns]

    def seen(self, logits: torch.Tensor) -> torch.Tensor:
        """Whether the classifier reads each scored control as held (exclusive: the one action it
        picks), bool [N, K]."""
        if self.spec.exclusive:
            return F.one_hot(logits.argmax(1), self.n_out).bool()
        return logits > 0

    def given(self, y: torch.Tensor) -> torch.Tensor:
        """Whether each scored control was held in the targets `y` (exclusive: the one action), bool [N, K]."""
        return F.one_hot(y, self.n_out).bool() if self.spec.exclusive else y > 0.5

    def chance(self, actions: np.ndarray) -> float:
        """Accuracy of always answering the most common action (per control for non-exclusive)."""
        y = self.targets(actions)
        if self.spec.exclusive:
            return float(torch.bincount(y, minlength=self.n_out).max() / len(y))
        return float(self.chances(y).mean())

    @staticmethod
    def chances(y: torch.Tensor) -> torch.Tensor:
        """Not exclusive: each control's chance (the share of its more common state), [K]."""
        p = y.mean(0)
        return torch.maximum(p, 1 - p)


MIN_GAIN = 0.1
"""The share of the way from chance to a perfect score that the ceiling must cover."""
Z = 3.0
"""Standard errors above chance the ceiling must be: a one-sided binomial test at p ~ 0.001."""


def needed(chance: float, n: int) -> float:
    """The ceiling above which the classifier reads real frames' actions: chance plus the larger
    of MIN_GAIN of the way to 1 and Z standard errors of a guesser that is right with
    probability `chance` on `n` transitions (binomial; for several binary controls the
    per-transition mean counts as one trial, which overstates the error: the safe side)."""
    return chance + max(MIN_GAIN * (1 - chance), Z * math.sqrt(chance * (1 - chance) / max(n, 1)))


def unreadable(ceiling: float, chance: float, n: int) -> str | None:
    """Why action following cannot be measured when the classifier's accuracy on `n` real
    held-out transitions (`ceiling`) is not clearly above `chance` (see `needed`); else None."""
    if n == 0 or not math.isfinite(ceiling):
        return "no real held-out transition to check the classifier on"
    need = needed(chance, n)
    if ceiling > need:
        return None
    if ceiling <= chance:
        return f"the classifier reads real frames' actions no better than chance ({ceiling:.3f} vs {chance:.3f})"
    return (f"the classifier reads real frames' actions not clearly better than chance ({ceiling:.3f} vs "
            f"{chance:.3f}; above {need:.3f} needed on {n} real transitions)")


@dataclass
class IdmResult:
    """A trained IDM and how well it reads real transitions."""

    model: InverseDynamics
    labels: ActionLabels
    ceiling: float
    """Accuracy on real held-out transitions."""
    chance: float
    """Most-common-action accuracy on the same transitions."""
    train_accuracy: float
    n_train: int
    n_heldout: int
    seconds: float = 0.0
    """Wall time of the training."""
    unread: tuple[str, ...] = ()
    """Controls left out because it does not read them on real frames (see `train_idm`)."""

    @property
    def unmeasured(self) -> str | None:
        """Why action following is not a figure (the classifier cannot read real frames), or None."""
        return unreadable(self.ceiling, self.chance, self.n_heldout)

    def summary(self) -> dict:
        return {"ceiling": self.ceiling, "chance": self.chance, "needed": needed(self.chance, self.n_heldout),
                "unmeasured": self.unmeasured, "train_accuracy": self.train_accuracy,
                "train_transitions": self.n_train, "heldout_transitions": self.n_heldout,
                "train_seconds": round(self.seconds, 1),
                "scored_controls": [self.labels.spec.names[i] for i in self.labels.columns],
                "unread_controls": list(self.unread), "exclusive": self.labels.spec.exclusive}


def fit(before: np.ndarray, after: np.ndarray, actions: np.ndarray, spec: ControlSpec, steps: int = 600,
        batch: int = 64, lr: float = 2e-3, device: torch.device | str = "cpu", seed: int = 0,
        progress: bool = False, desc: str = "action classifier", labels: ActionLabels | None = None
        ) -> InverseDynamics:
    """Train an IDM on real transitions (uint8 [N, H, W, 3] twice, actions [N, A]) with AdamW, to
    read `labels` (default: ActionLabels.for_data of these actions); `desc` names the progress bar."""
    labels = labels or ActionLabels.for_data(spec, actions)
    if labels.n_out == 0:
        raise EvalError("no binary control of the control spec is both held and not held in the data: "
                        "action following has nothing to score")
    torch.manual_seed(seed)
    model = InverseDynamics(labels.n_out).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    b, a, y = torch.from_numpy(before), torch.from_numpy(after), labels.targets(actions)
    rng = np.random.default_rng(seed)
    for _ in tqdm(range(steps), desc=desc, disable=not progress, leave=False):
        i = torch.from_numpy(rng.integers(0, len(y), min(batch, len(y))))
        loss = labels.loss(model(b[i].to(device), a[i].to(device)), y[i].to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def logits_of(model: InverseDynamics, before: np.ndarray, after: np.ndarray, batch: int = 512) -> torch.Tensor:
    """The IDM's logits for transitions (uint8 [N, H, W, 3] twice), [N, n_out] on the CPU."""
    dev = next(model.parameters()).device
    out = [model(torch.from_numpy(before[k:k + batch]).to(dev), torch.from_numpy(after[k:k + batch]).to(dev)).cpu()
           for k in range(0, len(before), batch)]
    return torch.cat(out) if out else torch.zeros(0, model.head.out_features)


def correct(model: InverseDynamics, labels: ActionLabels, before: np.ndarray, after: np.ndarray,
            actions: np.ndarray, batch: int = 512) -> np.ndarray:
    """Per transition, whether the IDM sees the given action: float [N] in [0, 1]."""
    return readings(model, labels, before, after, actions, batch)[0]


def readings(model: InverseDynamics, labels: ActionLabels, before: np.ndarray, after: np.ndarray,
             actions: np.ndarray, batch: int = 512) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per transition: whether the IDM sees the given action (`correct`'s, float [N]), and per
    scored control whether it reads the control held and whether it was (bool [N, K] twice)."""
    if len(actions) == 0:
        return np.zeros(0), np.zeros((0, labels.n_out), bool), np.zeros((0, labels.n_out), bool)
    logits, y = logits_of(model, before, after, batch), labels.targets(actions)
    return (labels.correct(logits, y).numpy().astype(np.float64), labels.seen(logits).numpy(),
            labels.given(y).numpy())


def per_key(keys: list[str], seen: np.ndarray, given: np.ndarray, real_seen: np.ndarray | None = None,
            real_given: np.ndarray | None = None) -> dict:
    """Each scored control: how many transitions held it, and the share of those in which the
    classifier reads it held ("shown_when_held") and of the others in which it reads it held
    anyway ("shown_when_not_held"), in the generated frames and (given) in the real ones; a share
    of no transitions is None. Which key a world fails to show, where the mean of `correct` over
    the keys says only that it fails one."""
    def share(hit: np.ndarray, where: np.ndarray) -> float | None:
        return round(float(hit[where].mean()), 4) if where.any() else None

    out = {}
    for k, name in enumerate(keys):
        g, s = given[:, k], seen[:, k]
        row = {"held": int(g.sum()), "shown_when_held": share(s, g), "shown_when_not_held": share(s, ~g)}
        if real_seen is not None:
            rg, rs = real_given[:, k], real_seen[:, k]
            row.update(real_held=int(rg.sum()), real_shown_when_held=share(rs, rg),
                       real_shown_when_not_held=share(rs, ~rg))
        out[name] = row
    return out


def split_by_time(transitions: tuple[np.ndarray, ...], share: float = 0.2) -> tuple[tuple, tuple]:
    """Transitions in the data's order (before, after, actions) -> (the first 1 - `share` to train
    on, the last `share` to check on): an honest ceiling where the data holds nothing out (a
    ceiling on the training transitions measures memory, not whether frames show actions)."""
    k = int(round(len(transitions[0]) * (1 - share)))
    return tuple(x[:k] for x in transitions), tuple(x[k:] for x in transitions)


def train_idm(train: tuple[np.ndarray, np.ndarray, np.ndarray], heldout: tuple[np.ndarray, np.ndarray, np.ndarray],
              spec: ControlSpec, **fit_kw) -> IdmResult:
    """Fit on `train` transitions (before, after, actions), score on `heldout` ones. Of several
    binary controls, it keeps those it reads on the held-out transitions: each one's accuracy
    above `needed` of its own chance. A key with no visible effect (or hardly ever let go) scores
    about its chance in real and generated frames alike, and in the mean it would hide a key
    that shows; where it reads none, all are kept and the mean decides (`unreadable`)."""
    t0 = time.perf_counter()
    labels = ActionLabels.for_data(spec, train[2])
    model = fit(*train, spec, labels=labels, **fit_kw)
    seconds = time.perf_counter() - t0
    unread: tuple[str, ...] = ()
    if not spec.exclusive and labels.n_out > 1 and len(heldout[2]):
        y = labels.targets(heldout[2])
        right, chances = labels.hits(logits_of(model, *heldout[:2]), y).mean(0), labels.chances(y)
        read = [k for k in range(labels.n_out) if right[k] > needed(float(chances[k]), len(y))]
        if read and len(read) < labels.n_out:
            unread = tuple(spec.names[c] for k, c in enumerate(labels.columns) if k not in read)
            model.keep(read)
            labels = ActionLabels(spec, tuple(labels.columns[k] for k in read))
    ceiling = correct(model, labels, *heldout)
    return IdmResult(model, labels, float(ceiling.mean()) if len(ceiling) else math.nan,
                     labels.chance(heldout[2]) if len(heldout[2]) else math.nan,
                     float(correct(model, labels, *train).mean()), len(train[0]), len(heldout[0]), seconds, unread)
