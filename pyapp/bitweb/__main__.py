"""`python -m bitweb SUBCOMMAND ...`: see bitweb.cli."""
import sys

from bitweb.cli import main

if __name__ == "__main__":
    sys.exit(main())
