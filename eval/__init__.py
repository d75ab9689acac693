"""Drift evaluation: metrics, rollouts and reports (`python -m eval drift|sweep`)."""

from dataset.errors import UserError


class EvalError(UserError):
    """A user mistake in an evaluation (option, file, data); the message names it and the fix."""
