"""Action following: a small inverse-dynamics model (IDM), trained on real recordings to tell
which action was held between two frames, then asked whether generated transitions show the
action that was given.

Its accuracy on real held-out transitions is the ceiling (what a perfect world model would
score: some actions have no visible effect in some states), and the share of the most common
action is chance. Exclusive specs (discrete game actions) are one classification; other specs
score each binary control separately (the mean of the per-control accuracies); continuous
controls are not scored.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from dreamcade.dataset.controls import BINARY, ControlSpec
from dreamcade.dataset.pixels import hwc_to_model
from dreamcade.eval import EvalError


class InverseDynamics(nn.Module):
    """(frame t, frame t+1) -> logits over the actions: three 3x3 convolutions over the two
    frames and their difference, then average and max pooling (small moving objects count)."""

    def __init__(self, n_out: int, width: int = 32) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.Conv2d(9, width, 3, padding=1), nn.SiLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.SiLU(),
            nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.SiLU())
        self.head = nn.Linear(4 * width, n_out)

    def forward(self, before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
        """before, after: uint8 [B, H, W, 3] -> logits [B, n_out]."""
        a, b = (hwc_to_model(x) for x in (before, after))  # float [B, 3, H, W] in [-1, 1]
        h = self.convs(torch.cat([a, b, b - a], 1))  # [B, 2w, H/4, W/4]
        return self.head(torch.cat([h.mean((2, 3)), h.amax((2, 3))], 1))


@dataclass
class ActionLabels:
    """How a spec's action rows become IDM targets."""

    spec: ControlSpec

    @property
    def columns(self) -> list[int]:
        """The scored action columns: all of an exclusive spec, else the binary controls."""
        return [i for i, c in enumerate(self.spec.controls) if c.kind == BINARY]

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
        return ((logits > 0) == (y > 0.5)).float().mean(1)

    def chance(self, actions: np.ndarray) -> float:
        """Accuracy of always answering the most common action (per control for non-exclusive)."""
        y = self.targets(actions)
        if self.spec.exclusive:
            return float(torch.bincount(y, minlength=self.n_out).max() / len(y))
        p = y.mean(0)
        return float(torch.maximum(p, 1 - p).mean())


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

    def summary(self) -> dict:
        return {"ceiling": self.ceiling, "chance": self.chance, "train_accuracy": self.train_accuracy,
                "train_transitions": self.n_train, "heldout_transitions": self.n_heldout,
                "scored_controls": [self.labels.spec.names[i] for i in self.labels.columns],
                "exclusive": self.labels.spec.exclusive}


def fit(before: np.ndarray, after: np.ndarray, actions: np.ndarray, spec: ControlSpec, steps: int = 600,
        batch: int = 64, lr: float = 2e-3, device: torch.device | str = "cpu", seed: int = 0,
        progress: bool = False) -> InverseDynamics:
    """Train an IDM on real transitions (uint8 [N, H, W, 3] twice, actions [N, A]) with AdamW."""
    labels = ActionLabels(spec)
    if labels.n_out == 0:
        raise EvalError("the control spec has no binary control for action following to score")
    torch.manual_seed(seed)
    model = InverseDynamics(labels.n_out).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    b, a, y = torch.from_numpy(before), torch.from_numpy(after), labels.targets(actions)
    rng = np.random.default_rng(seed)
    for _ in tqdm(range(steps), desc="action classifier", disable=not progress, leave=False):
        i = torch.from_numpy(rng.integers(0, len(y), min(batch, len(y))))
        loss = labels.loss(model(b[i].to(device), a[i].to(device)), y[i].to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return model.eval()


@torch.no_grad()
def correct(model: InverseDynamics, labels: ActionLabels, before: np.ndarray, after: np.ndarray,
            actions: np.ndarray, batch: int = 512) -> np.ndarray:
    """Per transition, whether the IDM sees the given action: float [N] in [0, 1]."""
    dev = next(model.parameters()).device
    y = labels.targets(actions)
    out = []
    for k in range(0, len(y), batch):
        logits = model(torch.from_numpy(before[k:k + batch]).to(dev), torch.from_numpy(after[k:k + batch]).to(dev))
        out.append(labels.correct(logits.cpu(), y[k:k + batch]))
    return torch.cat(out).numpy().astype(np.float64) if out else np.zeros(0)


def train_idm(train: tuple[np.ndarray, np.ndarray, np.ndarray], heldout: tuple[np.ndarray, np.ndarray, np.ndarray],
              spec: ControlSpec, **fit_kw) -> IdmResult:
    """Fit on `train` transitions (before, after, actions), score on `heldout` ones."""
    model = fit(*train, spec, **fit_kw)
    labels = ActionLabels(spec)
    return IdmResult(model, labels, float(correct(model, labels, *heldout).mean()), labels.chance(heldout[2]),
                     float(correct(model, labels, *train).mean()), len(train[0]), len(heldout[0]))
