"""A ``--problem import_exits:problem`` module that calls sys.exit(3) when imported (a
script given where a module was meant): one line, exit 2 (tests only)."""
import sys

sys.exit(3)
