"""The errors a user can act on (a leaf module: it imports nothing of the package).

The command line prints each as one line on stderr and exits with status 2; the Python
API raises them as they are.
"""
from __future__ import annotations


class UsageError(ValueError):
    """Bad input: a flag, a setting, a file. The message says what was wrong and what to do."""


class NonFiniteError(RuntimeError):
    """The loss became NaN or infinite: the run stops with a message naming round and token."""
