"""Capture sources (screen, gymnasium env) and input devices; writes through dataset.store."""
