"""The package's layers: no import cycle, mpi4py only where MPI lives, torch only where a
network needs it (a test that walks every import, at module level and inside functions)."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mpi_teleport"

# MPI is the transports' business (plain and elastic, with the spares' pool), and the MPI
# entry points' (they create COMM_WORLD).
MPI_ALLOWED = {"mpi_teleport.runtime.transport", "mpi_teleport.elastic.transport",
               "mpi_teleport.elastic.spares", "mpi_teleport.run", "mpi_teleport.latency.probe",
               "mpi_teleport.front.mpi_flavor",  # reads the library's version string, no MPI_Init
               "mpi_teleport.examples.logistic", "mpi_teleport.examples.custom_model",
               "mpi_teleport.examples.ported_script",
               "mpi_teleport.examples.mnist_port",  # (entry points: --mpi)
               "mpi_teleport.runtime.launched",  # (comm="auto": the script's COMM_WORLD, for it)
               "mpi_teleport.script_runner"}  # (the launcher's entry point for scripts)
# Leaf modules: they import nothing of the package.
LEAVES = {"mpi_teleport.errors"}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(package modules, outside top-level names) that module ``name`` imports anywhere."""
    inside, outside = set(), set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                (inside if alias.name in known else outside).add(
                    alias.name if alias.name in known else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if not base.startswith("mpi_teleport"):
                outside.add(base.split(".")[0])
                continue
            for alias in node.names:  # `from pkg import module` names a module
                sub = f"{base}.{alias.name}"
                inside.add(sub if sub in known else base)
    inside.discard(name)
    return inside, outside


def graph():
    found = modules()
    known = set(found)
    return {name: imports(name, path, known) for name, path in found.items()}


def test_no_import_cycle_inside_the_package():
    edges = {name: inside for name, (inside, _) in graph().items()}
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name)


def test_mpi4py_only_in_the_transport_and_the_entry_points():
    users = sorted(name for name, (_, outside) in graph().items() if "mpi4py" in outside)
    assert set(users) <= MPI_ALLOWED, f"mpi4py imported by {set(users) - MPI_ALLOWED}"


def test_errors_is_a_leaf_and_the_settings_are_pure():
    g = graph()
    for leaf in LEAVES:
        assert not g[leaf][0], f"{leaf} imports {g[leaf][0]}"
    inside, outside = g["mpi_teleport.session.settings"]
    assert not {"mpi_teleport.checkpoint", "mpi_teleport.session.preflight",
                "mpi_teleport.runtime.transport"} & inside
    assert "mpi4py" not in outside  # (os: os.fspath of a path setting, no file opened)


def units() -> dict[str, set[str]]:
    """The imports between the package's top-level modules and subpackages, a subpackage
    counting as one (mpi_teleport.core.rng -> core)."""
    def unit(name: str) -> str:
        parts = name.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    out: dict[str, set[str]] = {}
    for name, (inside, _) in graph().items():
        out.setdefault(unit(name), set()).update(unit(m) for m in inside if unit(m) != unit(name))
    return out


def test_the_layout_has_few_top_level_modules_and_short_import_chains():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 15, top
    edges = units()
    state: dict[str, str] = {}
    depth: dict[str, list[str]] = {}

    def longest(node: str) -> list[str]:  # (the unit graph has no cycle: checked here)
        if node in depth:
            return depth[node]
        assert state.get(node) != "open", f"import cycle between subpackages through {node}"
        state[node] = "open"
        best = [node]
        for nxt in sorted(edges.get(node, ())):
            chain = longest(nxt)
            if len(chain) + 1 > len(best):
                best = [node, *chain]
        state[node] = "done"
        depth[node] = best
        return best

    chain = max((longest(node) for node in sorted(edges)), key=len)
    assert len(chain) <= 10, " -> ".join(chain)
    for group in ("core", "runtime", "disk", "front", "session", "latency", "trace",
                  "checkpoint", "problems", "elastic"):  # internal: their docstring says so
        doc = (PACKAGE / group / "__init__.py").read_text()
        assert doc.lstrip('"').startswith("Internal"), group
    core = {m for m in edges["core"]}
    assert core <= {"errors", "problem"}, f"the pure core imports {core}"
    # domain and runtime code never sees a front end's settings (Values, the API's checks)
    for unit in ("core", "runtime", "disk", "latency", "problems", "checkpoint", "elastic"):
        assert "front" not in edges.get(unit, ()), f"{unit} imports the front ends"
        assert "session" not in edges.get(unit, ()), f"{unit} imports a run's settings"


# The front ends and the commands: the only importers of front/ (the command lines' job).
FRONT_USERS = {"__init__", "api", "run", "sim", "launch", "script_runner", "front"}


def test_nothing_below_the_front_ends_imports_them():
    """front/ holds the command lines' front end (the job a command line describes, its
    tables, the ranks' start-up agreement); a run's settings, their one preparation and
    ``train`` live below it in session/, which both front ends share. Only the package
    root, the API and the commands import front/."""
    edges = units()
    users = {unit for unit, targets in edges.items() if "front" in targets}
    assert users <= FRONT_USERS, f"front/ imported by {sorted(users - FRONT_USERS)}"
    assert "api" not in edges.get("session", ()), "session/ imports the Python API"


# ULFM's calls (MPI_Comm_agree, MPIX_Comm_iagree, revoke, shrink, failure acknowledgement)
ULFM_CALLS = ("Agree", "Iagree", "Revoke", "Shrink", "Ack_failed", "Get_failed")


def test_elastic_mode_lives_in_one_package():
    """Elastic mode and hot spares (the ULFM transport, the spares' pool, the survivors'
    rules, meeting and back ends) are mpi_teleport/elastic/: no module outside it calls
    ULFM or defines an elastic class; the engine reaches it only through the back-end
    interface (runtime/ imports none of it), and it imports no front end."""
    calls, defined = [], []
    for name, path in modules().items():
        if name == "mpi_teleport.elastic" or name.startswith("mpi_teleport.elastic."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ULFM_CALLS:
                calls.append(f"{name}: .{node.attr}")
            if isinstance(node, ast.ClassDef) and (
                    node.name in ("SparePool", "Meeting", "Living")
                    or node.name.startswith("Elastic")):
                defined.append(f"{name}: class {node.name}")
    assert not calls, f"ULFM called outside mpi_teleport/elastic: {calls}"
    assert not defined, f"elastic classes outside mpi_teleport/elastic: {defined}"
    edges = units()
    assert not {"front", "session", "api", "run", "sim"} & edges["elastic"], edges["elastic"]
    for unit in ("core", "runtime", "checkpoint", "disk", "latency", "problems", "trace"):
        assert "elastic" not in edges.get(unit, ()), f"{unit} imports mpi_teleport.elastic"


def test_no_private_name_imported_across_packages():
    """A name with a leading underscore stays in its package: no subpackage (or top-level
    module) imports one from another (the tests' hook to kill a rank is the documented
    mpi_teleport.elastic.test_hook)."""
    wrong = []
    for name, path in modules().items():
        here = name.split(".")[1] if "." in name else ""
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                base = f"{base}.{node.module}" if node.module else base
            if not base.startswith("mpi_teleport."):
                continue
            there = base.split(".")[1]
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and there != here:
                    wrong.append(f"{name}: from {base} import {alias.name}")
    assert not wrong, wrong


def test_torch_only_on_the_network_paths():
    torch_users = {name for name, (_, outside) in graph().items() if "torch" in outside}
    assert all(name.startswith(("mpi_teleport.problems", "mpi_teleport.examples"))
               or name in ("mpi_teleport.runtime.backends.device", "mpi_teleport.disk.loggers",
                           "mpi_teleport.core.optimizers")
               for name in torch_users), torch_users  # (loggers: TensorBoardWriter only;
    # optimizers: reads a torch optimizer's hyperparameters when optimizer= is given)


def _resolves(dotted: str) -> bool:
    """A module, or a module's attribute path, that exists (imported, nothing run)."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_names_of_the_package_outside_it_still_resolve():
    """Benchmarks, job scripts and documents name modules by their dotted path; a move of a
    module (issue 27's redesign moved most) must move those names too. A job script once
    asked ``mpi_teleport.front.config`` whether checkpoints exist, got an ImportError and
    ran without them, silently."""
    import re

    root = PACKAGE.parent
    files = [*root.glob("*.md"), *(root / "benchmarks").glob("*.py"), *(root / "benchmarks").glob("*.md"),
             *(p for p in (root / "jobs").iterdir() if p.is_file()), PACKAGE / "DESIGN.md"]
    missing = set()
    for path in files:
        text = path.read_text(errors="replace")
        for match in re.finditer(r"from (mpi_teleport(?:\.\w+)*) import ([\w, ]+)", text):
            for name in (n.strip().split(" as ")[0] for n in match.group(2).split(",") if n.strip()):
                if not _resolves(f"{match.group(1)}.{name}"):
                    missing.add(f"{path.relative_to(root)}: from {match.group(1)} import {name}")
        for match in re.finditer(r"\bmpi_teleport(?:\.\w+)+", text):
            if not _resolves(match.group(0)):
                missing.add(f"{path.relative_to(root)}: {match.group(0)}")
    assert not missing, "\n".join(sorted(missing))


def test_one_builder_of_run_settings():
    """Both front ends reach RunSettings through one function (session/prepare.py's
    prepare, which calls build there; issue 44): no other module of the package
    constructs one."""
    builders = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if called == "RunSettings":
                    builders.add(name)
    assert builders == {"mpi_teleport.session.prepare"}, builders


def _imported_names(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every import of the package in ``path``: its statements and
    those of the Python source it holds in strings (code a benchmark hands to its ranks);
    ``import mpi_teleport.x`` as (line, mpi_teleport.x, "")."""
    package = "mpi_teleport.examples" if path.parent.name == "examples" else ""
    found = []

    def walk(tree, offset=0):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.extend((node.lineno + offset, alias.name, "") for alias in node.names
                             if alias.name.startswith("mpi_teleport"))
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    module = f"{base}.{module}" if module else base
                if module.startswith("mpi_teleport"):
                    found.extend((node.lineno + offset, module, alias.name)
                                 for alias in node.names)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and "mpi_teleport" in node.value and "import" in node.value):
                try:
                    walk(ast.parse(node.value), node.lineno - 1)
                except SyntaxError:  # (prose, not code)
                    pass

    walk(ast.parse(path.read_text()))
    return found


def test_benchmarks_and_examples_import_only_documented_names():
    """The benchmarks and the examples use the public API (``mpi_teleport.__all__``) or the
    measurement surface (``mpi_teleport.measure.__all__``, docs/reference/measurement.md),
    so a change of the internals shows in one module, not in every benchmark."""
    import re

    import mpi_teleport
    from mpi_teleport import measure

    allowed = {"mpi_teleport": set(mpi_teleport.__all__) | {"__version__"},
               "mpi_teleport.measure": set(measure.__all__)}
    root = PACKAGE.parent
    files = [*(root / "benchmarks").glob("*.py"), *(PACKAGE / "examples").glob("*.py")]
    wrong = []
    for path in files:
        for line, module, name in _imported_names(path):
            if module == "mpi_teleport" and not name:  # import mpi_teleport (as mt)
                continue
            if module.startswith("mpi_teleport.examples"):  # (an example's own package)
                continue
            if name not in allowed.get(module, set()):
                wrong.append(f"{path.relative_to(root)}:{line}: "
                             f"{f'from {module} import {name}' if name else f'import {module}'}")
    assert not wrong, "\n".join(wrong)
    page = (root / "docs" / "reference" / "measurement.md").read_text()
    listed = {name for row in page.splitlines() if row.startswith("| ")
              for name in re.findall(r"`(\w+)`", row)}
    assert listed == set(measure.__all__), listed ^ set(measure.__all__)


def test_no_issue_numbers_in_the_package_or_the_benchmarks():
    """Code and docstrings say what a thing is, not which ticket asked for it (the history
    is in the commit messages and CHANGELOG.md)."""
    import re

    pattern = re.compile(r"[Ii]ssues? ?#?\d|#\d\d\b|\([Ii]ssue")
    root = PACKAGE.parent
    files = [*PACKAGE.rglob("*.py"), PACKAGE / "DESIGN.md", *(root / "benchmarks").glob("*.py")]
    found = [f"{path.relative_to(root)}:{number}: {line.strip()}"
             for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line)]
    assert not found, "\n".join(found)
