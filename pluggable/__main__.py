"""``python -m pluggable``: see ``pluggable.tools.cli``."""
import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
