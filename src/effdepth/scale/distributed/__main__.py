"""``torchrun ... -m effdepth.scale.distributed measure MODEL ...``: the command line lives in :mod:`effdepth.cli.torchrun`."""

import sys

from effdepth.cli.torchrun import main

if __name__ == "__main__":
    sys.exit(main())
