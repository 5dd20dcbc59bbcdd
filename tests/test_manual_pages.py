"""The manual's user pages are written for readers: no issue numbers, no commit hashes of
this repository, no lab-notebook notes (times of day, the machine's load that hour, which
attempt or session). History belongs in CHANGELOG.md, the commit messages and the dated
reports of benchmarks/results/; docs/development/ may speak of it.

Every page of docs/ outside development/ is scanned, with the files it includes (the
Design page includes mpi_teleport/DESIGN.md). A line that links to another project's
issue tracker (``github.com/...``) may cite that project's issue; the authors' own
repository, whose commit the Figure 3 recipe was read at, is the one hash allowed.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import ROOT

MANUAL = ROOT / "docs"
# The commit of the authors' repository (github.com/yukiTakezawa/BaseGraph) that the
# authors' recipe was read at: a citation of their code, not a commit of this repository.
ALLOWED_HASHES = {"c89b116903dc3b3fc0670582e6e5fd27ef15e6cb"}

ISSUE = re.compile(r"(?i)\b(?:issues?|pull request|PR)\s+#?\d+\b|(?<![\w&/#])#\d+\b")
# 7 to 40 hex digits with at least one letter and one digit (not a number, not a word)
HASH = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w-])")
NOTE = re.compile(
    r"(?i)(?<![\d:=])\b[0-2]?\d:[0-5]\d(?![:\d])"  # a time of day (not 02:00:00 of --time=)
    r"|\bUTC\b|\bload average\b|\bloaded (?:host|machine)\b|\bprevious run\b"
    r"|\bthis (?:session|issue)\b|\b(?:attempt|try) \d+\b")
INCLUDE = re.compile(r"^```\{include\}\s+(\S+)", re.M)


def user_pages() -> list[Path]:
    return [p for p in sorted(MANUAL.rglob("*.md"))
            if p.relative_to(MANUAL).parts[0] not in ("_build", "development")]


def with_includes(page: Path) -> list[Path]:
    found = [page]
    for target in INCLUDE.findall(page.read_text(encoding="utf-8")):
        included = (page.parent / target).resolve()
        if included.suffix == ".md" and included.is_file():
            found.append(included)
    return found


def findings(path: Path) -> list[str]:
    out = []
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{shown}:{number}"
        for m in ISSUE.finditer(line):
            if "github.com/" not in line:
                out.append(f"{where}: an issue number ({m.group(0)!r})")
        for m in HASH.finditer(line):
            if m.group(0) not in ALLOWED_HASHES and not any(h.startswith(m.group(0)) for h in ALLOWED_HASHES):
                out.append(f"{where}: a commit hash ({m.group(0)!r})")
        for m in NOTE.finditer(line):
            out.append(f"{where}: a lab-notebook note ({m.group(0)!r})")
    return out


def test_the_scan_sees_the_manual():
    pages = user_pages()
    assert len(pages) >= 30 and any(p.name == "overview.md" for p in pages)
    assert ROOT / "mpi_teleport" / "DESIGN.md" in with_includes(MANUAL / "design.md")


@pytest.mark.parametrize("text, kind", [
    ("as counted in issue #47", "issue"), ("(issue 16's final code)", "issue"), ("see #46.", "issue"),
    ("commit b739a7f", "hash"), ("run 2026-11-23 23:36-23:46 UTC", "note"),
    ("(load average 0.4 at the start)", "note"), ("previous run (21:01, loaded host)", "note"),
])
def test_the_scan_finds_what_it_looks_for(tmp_path, text, kind):
    page = tmp_path / "page.md"
    page.write_text(f"A line.\n{text}\n")
    found = findings(page)
    assert any(kind in f for f in found), found


@pytest.mark.parametrize("text", [
    "sbatch -n 64 --time=02:00:00 jobs/teleport.sbatch", "default 1048576, 1 MiB",
    "runs/x/checkpoints/round-00001000/", "measured 2026-11-26 on 2 cores",
    "[PRRTE issue 1839](https://github.com/openpmix/prrte/issues/1839)", "### A heading",
    "a CIFAR-10 run 703,125 VGG steps", "the ratio 10:1 of",
])
def test_the_scan_leaves_ordinary_text_alone(tmp_path, text):
    page = tmp_path / "page.md"
    page.write_text(text + "\n")
    assert not findings(page)


def test_no_user_page_holds_issue_numbers_hashes_or_lab_notes():
    found = [f for page in user_pages() for path in with_includes(page) for f in findings(path)]
    assert not found, ("pages of the manual are for readers (history goes in CHANGELOG.md, "
                       "dated reports in benchmarks/results/):\n" + "\n".join(found))


def test_the_concepts_figures_are_the_ones_the_build_draws():
    """Every figure a Concepts page shows is one docs/concepts/figures.py draws (the build
    runs it: docs/_ext/commands.py), from the package's schedule and topologies."""
    script = (MANUAL / "concepts" / "figures.py").read_text(encoding="utf-8")
    drawn = set(re.findall(r'out / "([\w.-]+\.png)"', script))
    shown = {m for page in (MANUAL / "concepts").glob("*.md")
             for m in re.findall(r"\]\(_figures/([\w.-]+\.png)\)", page.read_text(encoding="utf-8"))}
    assert shown and shown <= drawn, f"shown but not drawn: {sorted(shown - drawn)}"
    assert "schedule.holders" in script and "topology.mixing" in script
    assert "_draw_figures" in (MANUAL / "_ext" / "commands.py").read_text(encoding="utf-8")
