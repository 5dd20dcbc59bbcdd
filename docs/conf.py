"""Sphinx configuration of the manual (docs/).

Build (from the repository root; no network is used):

    .venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html

The pages are MyST Markdown; the API reference is rendered from the docstrings (autodoc +
napoleon) and each command's reference from its own argument parser (sphinx-argparse fed by
docs/_ext/commands.py), so neither can drift from the code.
"""
from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

# Importing mpi4py.MPI in this process must not start MPI (the command references build
# the parsers without running anything).
import mpi4py  # noqa: E402

mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
try:
    from mpi4py import MPI  # noqa: F401
except Exception:  # no MPI library (only the docs extra installed): nothing here calls MPI
    from unittest import mock

    sys.modules["mpi4py.MPI"] = mpi4py.MPI = mock.MagicMock()  # type: ignore[attr-defined]

from mpi_teleport._version import __version__  # noqa: E402

project = "mpi_teleport"
author = "the mpi_teleport developers"
copyright = "the mpi_teleport developers, MIT licence"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "commands",  # docs/_ext/commands.py: parsers, environment variables, figures
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
# myst: anchors for headings down to ### so that [text](page.md#a-heading) links are checked
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# (no intersphinx: the build never reaches the network)

autodoc_member_order = "bysource"
# torch is the nn extra's: where it is missing, the API reference reads TorchProblem's and
# EvalMetric's docstrings with torch mocked.
try:
    import torch  # noqa: F401
except ImportError:
    autodoc_mock_imports = ["torch", "torchvision"]
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_ivar = True  # a class's Attributes section: fields, not a second description
nitpicky = False

html_theme = "furo"
html_title = f"mpi_teleport {release}"
html_static_path: list[str] = []
html_show_sourcelink = False
pygments_style = "sphinx"
