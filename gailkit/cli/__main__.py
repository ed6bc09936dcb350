import sys

from gailkit.cli import main

sys.exit(main())
