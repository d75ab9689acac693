import sys

from dreamcade.cli import main

sys.exit(main())
