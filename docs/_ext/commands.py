"""The manual's own Sphinx extension: each command's argument parser, as the command builds it.

The reference pages render the parsers with sphinx-argparse (``:module: commands``,
``:func: <name>_parser``). Most commands build their parser inside ``main``; to get that very
parser without running the command, :func:`parser_of` calls ``main`` with ``parse_args``
replaced by a function that hands the parser back before anything else happens. The suite
(tests/test_docs.py) uses the same functions to check that every flag is in the reference.
"""
from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Callable


class _Parser(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def parser_of(main: Callable, argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser ``main(argv)`` builds, taken at its first ``parse_args``."""
    def grab(self, *args, **kwargs):
        raise _Parser(self)

    saved = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = grab  # type: ignore[method-assign]
    try:
        main([] if argv is None else argv)
    except _Parser as found:
        return found.parser
    finally:
        argparse.ArgumentParser.parse_args = saved  # type: ignore[method-assign]
    raise RuntimeError(f"{main.__module__}.main returned without parsing its arguments")


def sim() -> argparse.ArgumentParser:
    from mpi_teleport import sim

    return parser_of(sim.main)


def run() -> argparse.ArgumentParser:
    # run.main starts MPI before it builds its parser; the flags are the simulator's
    # (one parser, session/flags.build_parser), under the runtime's name.
    from mpi_teleport import run
    from mpi_teleport.front import cli

    return cli.build_parser(run.PROG, "Run Teleportation or Decentralized SGD with one MPI "
                                      "rank per node (under mpirun or srun).")


def launch() -> argparse.ArgumentParser:
    from mpi_teleport import launch

    return parser_of(launch.main)


def checkpoint() -> argparse.ArgumentParser:
    from mpi_teleport.checkpoint.__main__ import main

    return parser_of(main, ["newest", "."])


def latency_probe() -> argparse.ArgumentParser:
    from mpi_teleport.latency.probe import probe

    return parser_of(probe)


_RST_SPECIAL = re.compile(r"([\\|*`_])")


def as_rst(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser with its help texts escaped for reStructuredText: sphinx-argparse reads
    them as reST, the commands print them as plain text (``|i-j|`` is not a substitution)."""
    escape = lambda text: _RST_SPECIAL.sub(r"\\\1", text) if isinstance(text, str) else text
    parser.description = escape(parser.description)
    parser.epilog = escape(parser.epilog)
    for action in parser._actions:
        action.help = escape(action.help)
    return parser


def trace() -> argparse.ArgumentParser:
    from mpi_teleport.trace.__main__ import main

    return parser_of(main)


def mpi_flavor() -> argparse.ArgumentParser:
    from mpi_teleport.front.mpi_flavor import main

    return parser_of(main)


# Each command's parser as the command builds it (the suite checks its flags against the pages).
PARSERS = {"sim": sim, "run": run, "launch": launch, "checkpoint": checkpoint,
           "latency probe": latency_probe, "trace": trace, "mpi_flavor": mpi_flavor}


# What the reference pages render (``:func: sim_parser`` ...).
def sim_parser(): return as_rst(sim())
def run_parser(): return as_rst(run())
def launch_parser(): return as_rst(launch())
def checkpoint_parser(): return as_rst(checkpoint())
def latency_probe_parser(): return as_rst(latency_probe())
def trace_parser(): return as_rst(trace())
def mpi_flavor_parser(): return as_rst(mpi_flavor())


# ---------------------------------------------------------------------------- reports
# The dated measurement reports live beside their data in benchmarks/results/
# (<study>-<YYYY-MM-DD>.md). They are records, not pages of the manual: the Reports page
# lists them as files to open (downloads), newest first, written here before the build
# reads the sources (docs/results/reports.md, git-ignored).
REPORT = re.compile(r"^([a-z0-9][a-z0-9_.-]*)-(\d{4}-\d{2}-\d{2})\.md$")
REPORTS_PAGE = """# Reports

Dated measurement reports, one file per study and date, kept as they were written (the
commands as they were run then; a flag may have changed since). The current figures are on
the [results pages](index.md); each report is a file beside its data in
`benchmarks/results/`.

| date | study | file |
| --- | --- | --- |
"""


def report_list(docs: Path) -> Path:
    """Write docs/results/reports.md: every dated report of benchmarks/results/, newest first."""
    results = docs.parent / "benchmarks" / "results"
    rows = []
    for report in sorted(results.glob("*.md")):
        found = REPORT.match(report.name)
        if found:
            study, date = found.groups()
            rows.append((date, study.replace("_", " ").replace("-", " "), report.name))
    lines = [f"| {date} | {study} | {{download}}`{name} <../../benchmarks/results/{name}>` |"
             for date, study, name in sorted(rows, key=lambda r: (r[0], r[2]), reverse=True)]
    page = docs / "results" / "reports.md"
    text = REPORTS_PAGE + "\n".join(lines) + "\n"
    if not page.exists() or page.read_text() != text:
        page.write_text(text)
    return page


def _write_reports(app):
    report_list(Path(app.srcdir))


# ---------------------------------------------------------------------------- figures
def _draw_figures(app):
    """The Concepts pages' figures (docs/concepts/figures.py), drawn from the package."""
    import importlib.util

    path = Path(app.srcdir) / "concepts" / "figures.py"
    spec = importlib.util.spec_from_file_location("concept_figures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.draw_all(path.parent / "_figures")


def setup(app):
    app.connect("builder-inited", _write_reports)
    app.connect("builder-inited", _draw_figures)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
