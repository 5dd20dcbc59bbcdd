"""The package type-checks: ``python -m mypy`` from the repository root, with the
configuration in pyproject.toml ([tool.mypy]: the package ``mpi_teleport``; strict for the
public API and the pure core), exits 0. Serial, no MPI; skips, saying why, where mypy is
not installed (the ``test`` extra has it)."""
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


STRICT_MODULES = ["mpi_teleport", "mpi_teleport.api", "mpi_teleport.errors",
                  "mpi_teleport.problem", "mpi_teleport.core", "mpi_teleport.core.*"]
STRICT_FLAGS = ["disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls",
                "disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs",
                "disallow_untyped_decorators", "warn_unused_ignores", "warn_return_any",
                "no_implicit_reexport", "strict_equality", "extra_checks"]


def test_public_api_and_core_are_strict():
    """The public API and the pure core are checked with every per-module flag of
    ``mypy --strict`` (issue 27): the override in pyproject.toml names them all."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    strict = [o for o in config["overrides"] if "mpi_teleport.core.*" in o["module"]]
    assert len(strict) == 1, "one [[tool.mypy.overrides]] makes the core strict"
    assert sorted(strict[0]["module"]) == sorted(STRICT_MODULES)
    assert {flag: strict[0].get(flag) for flag in STRICT_FLAGS} == dict.fromkeys(STRICT_FLAGS, True)


def test_docstring_examples_run_as_doctests():
    """`pytest --doctest-modules mpi_teleport` passes: the docstrings' examples run."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--doctest-modules", "mpi_teleport",
                           "-q", "-p", "no:cacheprovider", "-n", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "no tests ran" not in proc.stdout
