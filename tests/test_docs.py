"""The manual builds without a warning, says everything, and every command and code example
in it runs.

The manual (docs/, Sphinx + MyST) is built once per suite with warnings as errors
(``sphinx -W --keep-going``: a broken link or anchor between its pages, a page outside every
toctree, a docstring napoleon cannot read are warnings); its reference must hold every
name of ``mpi_teleport.__all__``, every flag of every command (from the commands' own
parsers, docs/_ext/commands.py) and every ``MPI_TELEPORT_*`` variable the package reads.

The fenced blocks of README.md, jobs/README.md, benchmarks/README.md, PORTING.md,
mpi_teleport/DESIGN.md and every page of docs/ (the dated reports of benchmarks/results/
are records of what was run then, not checked) are extracted and, block by block (each in a fresh directory, its lines in
order, so a later line may use what an earlier one wrote):

* ```python blocks run in a subprocess and must exit 0;
* ```bash blocks: each command (continuation lines joined, comments stripped) must be one
  the test knows how to try cheaply, and is tried:
    - ``python -m mpi_teleport.<module> ...`` runs as written (the docs keep them small);
    - ``mpirun -n N python -m mpi_teleport.<module> ...`` and
      ``python -m mpi_teleport.launch -n N ...`` run under the test harness's mpirun
      when N <= 8; with more ranks only their flags are checked;
    - ``python benchmarks/<script>.py ...`` (the full benchmarks take minutes to an hour):
      ``--help`` exits 0 and documents every flag the doc uses;
* a block that cannot run here (SLURM, a cluster's MPI module, downloads, installs) needs
  ``<!-- not run: REASON -->`` on the line before its fence, and one that would take too
  long ``<!-- flags only: REASON -->``: its commands' flags are checked, nothing is run.
  Inside a "not run" block, the mpi_teleport and benchmark commands are still checked
  for their flags. A command the test does not recognise in an unmarked block fails the
  test, so nothing is skipped silently.
* other fences must say what they are (```text for output and layouts) and are not run.

``python -m mpi_teleport.run --help`` needs an MPI_Init (seconds); the runtime and the
simulator share one parser (``cli.build_parser``), so the runtime's flags are checked
against the simulator's help.
"""
from __future__ import annotations

import functools
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT

REPO_DOCS = ("README.md", "PORTING.md", "mpi_teleport/DESIGN.md", "benchmarks/README.md",
             "jobs/README.md")
MANUAL = ROOT / "docs"
# docs/results/reports/ holds generated pages that include benchmarks/results/*-DATE.md
DOCS = tuple(d for d in REPO_DOCS if (ROOT / d).exists()) + tuple(
    str(p.relative_to(ROOT)) for p in sorted(MANUAL.rglob("*.md"))
    if "_build" not in p.parts and "reports" not in p.parts)
SHELL = {"bash", "sh", "shell", "console"}
NOT_RUN = {"text"}  # output, file layouts, pseudo-code
MARKER = re.compile(r"^<!--\s*(not run|flags only):\s*(\S.*?)\s*-->$")
PYTHONS = {"python", "python3", ".venv/bin/python"}
MAX_RANKS = 8  # more ranks than this on a 2-core test machine: check the flags only
TIMEOUT = 300


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    marker: tuple[str, str] | None  # ("not run" | "flags only", reason)

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(doc: str) -> list[Block]:
    """The fenced blocks of ``doc`` (a fence may be indented, inside a list item; MyST
    directives, ```{name}, are not code and are left out)."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```\s*(\{[^}]*\}.*|\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start, indent, lang = i, fence.group(1), fence.group(2)
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if lang.startswith("{"):  # a MyST directive (toctree, include, argparse, eval-rst)
            i += 1
            continue
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        found = MARKER.match(before)
        out.append(Block(doc, start + 1, lang, "\n".join(body) + "\n",
                         (found.group(1), found.group(2)) if found else None))
        i += 1
    return out


ALL = [b for doc in DOCS for b in blocks(doc)]
PYTHON_BLOCKS = [b for b in ALL if b.lang == "python"]
SHELL_BLOCKS = [b for b in ALL if b.lang in SHELL]


def commands(block: Block) -> list[list[str]]:
    """The block's commands as token lists: continuation lines joined, comments dropped."""
    joined = block.text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        tokens = shlex.split(line, comments=True)
        if tokens:
            out.append(tokens)
    return out


@dataclass(frozen=True)
class Command:
    kind: str  # module, mpirun, script, unknown
    target: str = ""  # module name or script path
    args: tuple[str, ...] = ()
    ranks: int = 0
    env: tuple[tuple[str, str], ...] = ()


def classify(tokens: list[str]) -> Command:
    env = []
    while tokens and re.match(r"^[A-Z_][A-Z0-9_]*=", tokens[0]):
        name, _, value = tokens[0].partition("=")
        env.append((name, value))
        tokens = tokens[1:]
    ranks = 0
    if tokens[:1] == ["mpirun"] and len(tokens) > 3 and tokens[1] == "-n":
        ranks, tokens = int(tokens[2]), tokens[3:]
    if len(tokens) >= 3 and tokens[0] in PYTHONS and tokens[1] == "-m" \
            and tokens[2].startswith("mpi_teleport."):
        module, args = tokens[2], tuple(tokens[3:])
        if module == "mpi_teleport.launch":
            n = _launch_ranks(args)
            return Command("mpirun", module, args, n, tuple(env))
        return Command("mpirun" if ranks else "module", module, args, ranks, tuple(env))
    if len(tokens) >= 2 and tokens[0] in PYTHONS and tokens[1].startswith("benchmarks/") and not ranks:
        return Command("script", tokens[1], tuple(tokens[2:]), 0, tuple(env))
    return Command("unknown", " ".join(tokens))


def _launch_ranks(args) -> int:
    for flag in ("-n", "--ranks"):
        if flag in args:
            return int(args[args.index(flag) + 1])
    return 25  # launch's default


def segments(tokens: list[str]) -> list[list[str]]:
    """A shell line split at && / || / ; (each part a command)."""
    parts, current = [], []
    for tok in tokens:
        if tok in ("&&", "||", ";"):
            parts.append(current)
            current = []
        else:
            current.append(tok)
    parts.append(current)
    return [p for p in parts if p]


# ---------------------------------------------------------------------------- running
def _env(extra=()) -> dict:
    from mpi_teleport.launch import mpi_env

    env = mpi_env(dict(os.environ))
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = "1"
    env.update(dict(extra))
    return env


def _run(argv: list[str], cwd: Path, env=(), timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(argv, cwd=cwd, env=_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(argv)} did not finish in {timeout} s\n{err[-2000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@functools.lru_cache(maxsize=None)
def help_text(kind: str, target: str, sub: str = "") -> str:
    """--help of a script or module (of its subcommand ``sub``, e.g. ``latency probe``)."""
    if kind == "script":
        argv = [sys.executable, target, "--help"]
    else:
        module = "mpi_teleport.sim" if target == "mpi_teleport.run" else target
        argv = [sys.executable, "-m", module, *([sub] if sub else []), "--help"]
    res = _run(argv, ROOT, timeout=120)
    assert res.returncode == 0, f"{' '.join(argv)} exited {res.returncode}: {res.stderr[-1000:]}"
    return res.stdout


def check_flags(cmd: Command, where: str) -> None:
    """--help of the command's module or script exits 0 and names every flag used."""
    args = list(cmd.args)
    if cmd.target == "mpi_teleport.launch":
        from mpi_teleport.launch import split_program

        own, program = split_program(args)
        if program is not None:  # a user's program: its own flags are its business
            _flags_in(help_text("module", "mpi_teleport.launch"), own, cmd, where)
            return
        split = args.index("--") if "--" in args else len(args)
        own, args = args[:split], args[split + 1:]
        _flags_in(help_text("module", "mpi_teleport.launch"), own, cmd, where)
        _flags_in(help_text("module", "mpi_teleport.run"), args, cmd, where)
        return
    sub = args[0] if args and re.fullmatch(r"[a-z]+", args[0]) else ""
    _flags_in(help_text("script" if cmd.kind == "script" else "module", cmd.target, sub), args,
              cmd, where)


def _flags_in(text: str, args, cmd: Command, where: str) -> None:
    for arg in args:
        if arg.startswith("--") and arg != "--":
            flag = arg.split("=", 1)[0]
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), \
                f"{where}: {cmd.target} has no flag {flag} (see its --help)"


def try_command(cmd: Command, where: str, cwd: Path, mpirun) -> None:
    """Run the command cheaply as the module docstring says."""
    if cmd.kind == "script":
        check_flags(cmd, where)
    elif cmd.kind == "module":
        res = _run([sys.executable, "-m", cmd.target, *cmd.args], cwd, cmd.env)
        assert res.returncode == 0, f"{where}: exit {res.returncode}\n{res.stderr[-2000:]}"
    elif cmd.kind == "mpirun" and cmd.ranks > MAX_RANKS:
        check_flags(cmd, where)
    elif cmd.kind == "mpirun":
        if cmd.target == "mpi_teleport.launch":
            res = _run([sys.executable, "-m", cmd.target, *cmd.args], cwd, cmd.env)
        else:
            res = mpirun(cmd.ranks, ["-m", cmd.target, *cmd.args], timeout=TIMEOUT, cwd=cwd,
                         env=_env(cmd.env))
        assert res.returncode == 0, f"{where}: exit {res.returncode}\n{res.stderr[-2000:]}"
    else:
        pytest.fail(f"{where}: this test cannot run `{cmd.target}`; make it a command it "
                    f"can try, or mark the block <!-- not run: REASON --> (see tests/test_docs.py)")


# ---------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=lambda b: b.id)
def test_python_block_runs(block, tmp_path):
    if block.marker:
        pytest.skip(f"marked {block.marker[0]}: {block.marker[1]}")
    res = _run([sys.executable, "-c", block.text], tmp_path)
    assert res.returncode == 0, f"{block.id}: exit {res.returncode}\n{res.stderr[-3000:]}"


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.id)
def test_shell_block_runs(block, tmp_path, mpirun):
    mode = block.marker[0] if block.marker else "run"
    for n, tokens in enumerate(commands(block)):
        where = f"{block.id} command {n + 1}"
        parts = [classify(p) for p in segments(tokens)]
        if mode == "not run":  # nothing runs; what we recognise is still checked
            for cmd in parts:
                if cmd.kind != "unknown":
                    check_flags(cmd, where)
            continue
        assert len(parts) == 1, f"{where}: one command per line, please (or mark the block)"
        if mode == "flags only":
            assert parts[0].kind != "unknown", f"{where}: cannot check `{parts[0].target}`"
            check_flags(parts[0], where)
        else:
            try_command(parts[0], where, tmp_path, mpirun)


def test_every_fence_says_what_it_is():
    for block in ALL:
        assert block.lang in SHELL | NOT_RUN | {"python"}, \
            f"{block.id}: label the fence (```bash, ```python or ```text), got {block.lang!r}"


def test_the_docs_contain_what_is_run():
    """Guards the parser: losing the blocks would make every test above pass vacuously."""
    run = [c for b in SHELL_BLOCKS if not b.marker for t in commands(b)
           for c in map(classify, segments(t)) if c.kind in ("module", "mpirun")]
    assert len(PYTHON_BLOCKS) >= 4 and len(run) >= 8
    assert any(b.doc == "README.md" for b in PYTHON_BLOCKS)


def test_readme_test_command_is_ci_run():
    ci = (ROOT / ".ci" / "run").read_text()
    line = next(ln for ln in ci.splitlines() if "-m pytest" in ln)
    command = line.split(" || ")[0].strip()
    assert command in (ROOT / "README.md").read_text()


def test_design_pointers_name_existing_sections():
    """Every "DESIGN.md §N" in the package, the tests and the docs is
    "mpi_teleport/DESIGN.md §N" and §N is a heading of that file."""
    design = (ROOT / "mpi_teleport" / "DESIGN.md").read_text()
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", design, re.M))
    files = [*ROOT.glob("mpi_teleport/**/*.py"), *ROOT.glob("tests/**/*.py"),
             *(ROOT / d for d in DOCS)]
    pointers = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"(\S*?)DESIGN\.md`? §(\d+(?:\.\d+)?)", text):
            where = f"{path.relative_to(ROOT)}: {m.group(0)}"
            assert m.group(1).endswith("mpi_teleport/"), f"{where}: point at mpi_teleport/DESIGN.md"
            assert m.group(2) in sections, f"{where}: DESIGN.md has no section {m.group(2)}"
            pointers += 1
    assert pointers >= 8


@pytest.mark.parametrize("found_running", [False, True], ids=["started here", "found running"])
def test_the_suite_stops_the_slurm_it_started(monkeypatch, found_running):
    """Issue 31, class 10: the README's command (not only .ci/run) stops the local SLURM
    daemons a test session started (tests/test_jobs_slurm.py, conftest's
    pytest_sessionfinish), and leaves running a SLURM it found running."""
    import subprocess

    import test_jobs_slurm as slurm

    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd[-1])
        code = 0 if cmd[-1] != "status" or found_running else 1
        return subprocess.CompletedProcess(cmd, code, "SLURM_CONF=/etc/slurm/x.conf\n", "")

    monkeypatch.setattr(slurm.subprocess, "run", run)
    monkeypatch.setattr(slurm, "STARTED_BY_THIS_SESSION", [])
    assert slurm._start_slurm()["env"]["SLURM_CONF"] == "/etc/slurm/x.conf"
    import types

    import conftest
    import test_jobs_figure4

    session = types.SimpleNamespace(items=[types.SimpleNamespace(module=m) for m in (
        slurm, test_jobs_figure4, slurm)])
    conftest.pytest_sessionfinish(session)  # (two modules use it: stopped once)
    assert calls == ["status", "start"] + ([] if found_running else ["stop"])


# ---------------------------------------------------------------------------- the manual
BUILD = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
BUILD_TIMEOUT = 300


@pytest.fixture(scope="module")
def manual(tmp_path_factory):
    """The manual built once for this module (under pytest-xdist: once on the worker that
    runs the group below), warnings as errors: (exit status, warnings, the HTML folder)."""
    pytest.importorskip("sphinx", reason="the manual needs the docs extra: pip install -c "
                                         "constraints.txt -e '.[docs]' (the test extra has it)")
    for needed in ("myst_parser", "furo", "sphinxarg"):
        pytest.importorskip(needed, reason=f"{needed} missing: pip install -c constraints.txt -e '.[docs]'")
    out = tmp_path_factory.mktemp("manual")
    html, doctrees = out / "html", out / "doctrees"
    env = _env()
    env.pop("PYTHONWARNINGS", None)
    proc = subprocess.run([*BUILD, "-d", str(doctrees), str(MANUAL), str(html)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    return proc.returncode, proc.stderr, html


def _page_text(html: Path, page: str) -> str:
    import html as html_lib

    return html_lib.unescape((html / page).read_text(encoding="utf-8"))


@pytest.mark.xdist_group("docs_manual")
def test_the_manual_builds_without_a_warning(manual):
    """-W --keep-going: every warning is an error (a link or anchor between pages that does
    not resolve, a page in no toctree, a docstring the API reference cannot render)."""
    status, warnings_text, html = manual
    assert status == 0, f"the manual's build failed ({' '.join(BUILD)} docs ...):\n{warnings_text[-6000:]}"
    assert (html / "index.html").is_file()


@pytest.mark.xdist_group("docs_manual")
def test_every_public_name_is_in_the_api_reference(manual):
    import mpi_teleport

    status, _, html = manual
    assert status == 0, "the manual did not build (see the test above)"
    page = _page_text(html, "reference/api.html")
    missing = [n for n in mpi_teleport.__all__ if f'id="mpi_teleport.{n}"' not in page]
    assert not missing, f"docs/reference/api.md does not render {missing} (add an autodoc entry)"


@pytest.mark.xdist_group("docs_manual")
def test_every_flag_of_every_command_is_in_the_reference(manual):
    """Each command's own parser (docs/_ext/commands.py takes it from the command's main)
    against its section of reference/commands: every option string and positional."""
    sys.path.insert(0, str(MANUAL / "_ext"))
    try:
        import commands as parsers
    finally:
        sys.path.pop(0)
    status, _, html = manual
    assert status == 0, "the manual did not build (see the test above)"
    page = _page_text(html, "reference/commands.html")
    starts = {}
    for name in parsers.PARSERS:  # each command's section runs to the next command's
        anchor = f'<section id="{re.sub(r"[ _]", "-", name)}">'
        assert anchor in page, f"reference/commands has no section for {name}"
        starts[name] = page.index(anchor)
    ends = sorted(starts.values()) + [len(page)]
    checked = 0
    for name, build in parsers.PARSERS.items():
        section = page[starts[name]:next(e for e in ends if e > starts[name])]
        shown = {flag for kbd in re.findall(r"<kbd>(.*?)</kbd>", section)
                 for flag in re.sub(r"<[^>]+>", "", kbd).split(", ")}
        for action in build()._actions:
            for flag in action.option_strings or [action.dest]:
                if flag in ("-h", "--help"):
                    continue
                assert flag in shown, f"python -m mpi_teleport.{name}: {flag} is not in the reference"
                checked += 1
    assert checked >= 40


def _package_env_vars() -> set[str]:
    found = set()
    for path in (ROOT / "mpi_teleport").rglob("*.py"):
        found.update(re.findall(r"\bMPI_TELEPORT_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")))
    return found


def test_every_environment_variable_the_package_reads_is_in_the_reference():
    documented = set(re.findall(r"^`(MPI_TELEPORT_[A-Z0-9_]+)`$",
                                (MANUAL / "reference" / "environment.md").read_text(), re.M))
    read = _package_env_vars()
    assert read, "the package names no MPI_TELEPORT_ variable: the scan is broken"
    assert not read - documented, f"not in docs/reference/environment.md: {sorted(read - documented)}"
    assert not documented - read, f"documented but read nowhere in the package: {sorted(documented - read)}"


def test_the_readmes_fit_and_point_at_files_that_exist():
    """README.md fits a screen or two (at most 100 lines), jobs/README.md at most 250; their
    relative links name files of the repository."""
    assert len((ROOT / "README.md").read_text().splitlines()) <= 100
    assert len((ROOT / "jobs" / "README.md").read_text().splitlines()) <= 250
    for doc in ("README.md", "jobs/README.md", "benchmarks/README.md"):
        text = (ROOT / doc).read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue
            assert ((ROOT / doc).parent / target).exists(), f"{doc}: link to {target}, which does not exist"


def test_no_guide_page_holds_a_dated_measurement_log():
    """Dated measurement logs live in benchmarks/results/<study>-<date>.md; a tutorial or
    how-to guide has no section headed by a date."""
    for page in [*MANUAL.glob("tutorials/*.md"), *MANUAL.glob("howto/*.md")]:
        for line in page.read_text(encoding="utf-8").splitlines():
            assert not (line.startswith("#") and re.search(r"\b20\d\d-\d\d-\d\d\b", line)), \
                f"{page.relative_to(ROOT)}: a dated section ({line.strip()}); move it to a report in benchmarks/results/"
