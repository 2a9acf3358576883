"""``python -m effdepth.cli ...`` (the same as the ``effdepth`` command)."""

import sys

from effdepth.cli import main

sys.exit(main())
