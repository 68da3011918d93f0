"""``python -m lsmstore``: the ``lsmstore`` command line (:mod:`lsmstore.cli`)."""

import sys

from lsmstore.cli import main

if __name__ == "__main__":
    sys.exit(main())
