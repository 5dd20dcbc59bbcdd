"""A ``--problem import_interrupted:problem`` module whose import raises
KeyboardInterrupt: one line, exit 2, no traceback (tests only)."""
raise KeyboardInterrupt
