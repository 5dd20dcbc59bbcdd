"""Every code name mpi_teleport/DESIGN.md cites exists: a dotted name in backticks
(`module.function`, `Class.method`, `Class.field`, `module.Class.member`, optionally
called: `schedule.holders(seed, n, k, t)`) resolves by import and getattr, a class or
constant name (`TokenState`, `RECORDS_KEPT`) is defined in some module of the package,
and a cited file (`backends/mpi.py`, `tests/test_layers.py`) is there. Serial, no MPI."""
from __future__ import annotations

import ast
import importlib
import re

import pytest

from helpers import ROOT

PACKAGE = ROOT / "mpi_teleport"
DESIGN = PACKAGE / "DESIGN.md"

DOTTED = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?$")
CLASS_OR_CONSTANT = re.compile(r"^(?:[A-Z][a-z]\w*|[A-Z][A-Z0-9]*_[A-Z0-9_]+)$")
DATA_FILES = (".json", ".jsonl", ".npy", ".npz", ".csv", ".toml", ".md", ".txt")
# Names of other libraries and of the user's objects that the text cites.
OUTSIDE = {"math", "torch", "np", "numpy", "model", "mpi4py", "MPI"}
OUTSIDE_NAMES = {"Dataset", "MPI_Abort", "Send_init", "Recv_init", "Startall", "Waitall"}
ALIASES = {"mt": "mpi_teleport"}


def cited() -> list[str]:
    text = DESIGN.read_text()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks run in test_docs
    return sorted(set(re.findall(r"`([^`\n]+)`", text)))


def definitions() -> dict[str, list[str]]:
    """Top-level names (classes, functions, constants) -> the modules defining them."""
    out: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        module = ".".join(parts)
        for node in ast.parse(path.read_text()).body:
            names = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names = [node.name]
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    elts = target.elts if isinstance(target, ast.Tuple) else [target]
                    names += [e.id for e in elts if isinstance(e, ast.Name)]
            for name in names:
                out.setdefault(name, []).append(module)
    return out


def modules_named(last: str) -> list[str]:
    """Package modules whose last component is ``last`` (`teleport` -> ...algorithms.teleport)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if parts[-1] == last:
            found.append(".".join(parts))
    return found


def has_member(obj, name: str) -> bool:
    if hasattr(obj, name):
        return True
    # a dataclass field or a Protocol's declared attribute has no class attribute
    return name in getattr(obj, "__dataclass_fields__", {}) or any(
        name in getattr(cls, "__annotations__", {}) for cls in getattr(obj, "__mro__", ()))


def resolve(dotted: str, defs: dict[str, list[str]]) -> bool:
    head, *rest = dotted.split(".")
    head = ALIASES.get(head, head)
    starts = []
    if head == "mpi_teleport":
        starts.append(("mpi_teleport", rest))
    else:
        for i in range(len(rest), -1, -1):  # the longest module path first
            starts.append(("mpi_teleport." + ".".join([head, *rest[:i]]), rest[i:]))
        starts += [(".".join([module, *rest[:i]]), rest[i:])  # (a subpackage's module too)
                   for module in modules_named(head) for i in range(len(rest), -1, -1)]
        starts += [(module, [head, *rest]) for module in defs.get(head, [])]
    for module, attrs in starts:
        try:
            obj = importlib.import_module(module)
        except ImportError:
            continue
        ok = True
        for i, attr in enumerate(attrs):
            if not has_member(obj, attr):
                ok = False
                break
            if not hasattr(obj, attr):  # a field: nothing to descend into
                ok = i == len(attrs) - 1
                break
            obj = getattr(obj, attr)
        if ok:
            return True
    return False


def test_design_cites_only_names_that_exist():
    defs = definitions()
    missing = []
    for token in cited():
        if token.endswith(DATA_FILES) or token.startswith(("-", "$")):
            continue
        if re.match(r"^[A-Za-z_]\w*(?:\.\w+)+\(.*\)[.\[]", token):
            missing.append(token)  # a member of a call's result: cite it as Class.member
            continue
        if "/" in token or token.endswith(".py"):  # a file or directory of the repository
            path = token.rstrip("/")
            if "<" in path or " " in path:
                continue
            if not ((PACKAGE / path).exists() or (ROOT / path).exists()
                    or any(PACKAGE.rglob(path))):
                missing.append(token)
            continue
        match = DOTTED.match(token)
        if match:
            if match.group(1).split(".")[0] in OUTSIDE:
                continue
            if not resolve(match.group(1), defs):
                missing.append(token)
        elif CLASS_OR_CONSTANT.match(token) and token not in OUTSIDE_NAMES:
            if token not in defs:
                missing.append(token)
    assert not missing, f"DESIGN.md cites names that do not exist: {missing}"


@pytest.mark.parametrize("name,exists", [
    ("plan.overlap_step", True), ("MpiBackend._prev_roster", False),
    ("algorithms.teleport.overlap_round", True), ("plan.OverlapStep.y_to", True),
    ("Phase.fresh", True), ("Phase.nothing", False), ("teleport.simple_round", True),
    ("mt.search_k", True), ("backends.compiled.RECORDS_KEPT", True),
])
def test_resolver(name, exists):
    assert resolve(name, definitions()) is exists
