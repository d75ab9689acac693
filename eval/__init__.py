"""Drift evaluation: metrics, rollouts and reports."""
