"""``python -m effdepth.cli ...`` (the same as the ``effdepth`` command)."""

import sys

from . import main

sys.exit(main())
