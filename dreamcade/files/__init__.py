"""Models on disk: the model folder and training checkpoints (checkpoint), configs (config_file),
world folders and their card (world), loading a model to run it (inference), frame sizes (frames)."""
