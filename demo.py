"""The whole loop on Breakout: `python demo.py` (the same as `dreamcade demo`, and `make demo`).
The code is dreamcade.demo; this file is the entry point a clone runs without installing."""

import sys

from dreamcade.demo import main

if __name__ == "__main__":
    sys.exit(main())
