"""Training: the one loop (loop: Task, train), its parts (data, optimizer, run folder, log), what
it reports while it trains (samples) and distillation (distill, settings)."""
