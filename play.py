"""Play the generated game: `python play.py --checkpoint WORLD_OR_RUN` (the same as `dreamcade play`).
The code is dreamcade.play (its __main__); this file is the entry point a clone runs without installing."""

import sys

from dreamcade.play.__main__ import main

if __name__ == "__main__":
    sys.exit(main(prog="play.py"))
