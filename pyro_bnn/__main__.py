"""``python -m pyro_bnn ...``: the same command line as ``pyro-bnn ...``."""

import sys

from pyro_bnn.cli import main

if __name__ == "__main__":
    sys.exit(main())
