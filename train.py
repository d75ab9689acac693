"""Train a world model: `python train.py --config PRESET [key=value ...]` (the same as `dreamcade
train`). The code is dreamcade.train; this file is the entry point a clone runs without installing."""

import sys

from dreamcade.train import main

if __name__ == "__main__":
    sys.exit(main())
