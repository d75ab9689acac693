"""Drift evaluation: metrics, rollouts and reports (`dreamcade eval drift|sweep`)."""

from dreamcade.dataset.errors import UserError


class EvalError(UserError):
    """A user mistake in an evaluation (option, file, data); the message names it and the fix."""
