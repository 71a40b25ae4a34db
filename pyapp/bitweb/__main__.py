"""`python -m bitweb SUBCOMMAND ...`: see bitweb.commands."""
import sys

from bitweb.commands import main

if __name__ == "__main__":
    sys.exit(main())
