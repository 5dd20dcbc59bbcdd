"""The package type-checks: ``python -m mypy`` from the repository root, with the
configuration in pyproject.toml ([tool.mypy]: the package ``mpi_teleport``), exits 0.
Serial, no MPI; skips, saying why, where mypy is not installed (the ``test`` extra has it)."""
from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import ROOT


def test_package_type_checks_with_mypy():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -c constraints.txt -e '.[test]')")
    # mypy's incremental cache outside the checkout (nothing written into it), one per
    # checkout: a clean run takes about 13 s, a run after a change about 1 s; mypy checks
    # every changed module and what depends on it again, so the verdict is the same
    cache = Path(tempfile.gettempdir()) / (
        "mpi-teleport-mypy-" + hashlib.sha1(str(ROOT.resolve()).encode()).hexdigest()[:12])
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"mypy failed (exit {proc.returncode}):\n"
                                  f"{proc.stdout}{proc.stderr}")
