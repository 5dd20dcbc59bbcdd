"""Every command and code example in the docs runs.

The fenced blocks of README.md, mpi_teleport/DESIGN.md, benchmarks/README.md and
jobs/README.md are extracted and, block by block (each in a fresh directory, its lines in
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

DOCS = ("README.md", "mpi_teleport/DESIGN.md", "benchmarks/README.md", "jobs/README.md")
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
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```\s*(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start, lang = i, fence.group(1)
        body = []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
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
