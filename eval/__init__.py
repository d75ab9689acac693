"""Drift evaluation: metrics, rollouts and reports (`python -m eval drift|sweep`)."""


class EvalError(Exception):
    """A user mistake in an evaluation (option, file, data); the message names it and the fix."""
