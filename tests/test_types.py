"""The package type-checks: ``python -m mypy`` from the repository root, with the
configuration in pyproject.toml ([tool.mypy]: the package ``mpi_teleport``), exits 0.
Serial, no MPI; skips, saying why, where mypy is not installed (the ``test`` extra has it)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from helpers import ROOT


def test_package_type_checks_with_mypy(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -c constraints.txt -e '.[test]')")
    # (the cache in tmp_path: nothing written into the checkout)
    proc = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (f"mypy failed (exit {proc.returncode}):\n"
                                  f"{proc.stdout}{proc.stderr}")
