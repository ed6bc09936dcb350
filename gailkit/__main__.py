"""`python -m gailkit ...`: the same command line as the `gailkit` script."""

import sys

from gailkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
