"""One front door: a simulator run and an MPI run of the command line start through the
public run function, ``mpi_teleport.train(problem, settings, comm)``, as a user's script
would (mpi_teleport/DESIGN.md §6.1b), and give the API's numbers."""
from __future__ import annotations

import json

import mpi_teleport as mt
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from helpers import ROOT, without_time

FLAGS = ["--algorithm", "teleportation", "--k", "2", "--rounds", "12", "--lr", "0.05",
         "--dim", "4", "--log-every", "4"]

# Under mpirun: each rank wraps mpi_teleport.train, runs the command line's main, and
# says (after the run: communicate first, assert after) how often train ran and with what.
SPY = """
import json, sys
import mpi_teleport.api as api
from mpi_teleport.runtime.transport import Transport
calls = []
real = api.train
def spy(problem, settings, comm=None, context=None):
    calls.append([settings.spec.algorithm, settings.spec.k, isinstance(comm, Transport)])
    return real(problem, settings, comm, context)
api.train = spy
from mpi_teleport.run import main
status = main(sys.argv[1:])
from mpi4py import MPI
print("CALLS " + json.dumps([MPI.COMM_WORLD.Get_rank(), status, calls]), flush=True)
"""


def test_the_simulator_command_line_runs_through_train(tmp_path, monkeypatch):
    calls = []
    real = mt.api.train

    def spy(problem, settings, comm=None, context=None):
        calls.append((settings.spec.algorithm, settings.spec.k, comm))
        return real(problem, settings, comm, context)

    monkeypatch.setattr(mt.api, "train", spy)
    assert sim_main(["--nodes", "4", *FLAGS, "--out", str(tmp_path)]) == 0
    assert calls == [("teleportation", 2, None)]
    # the same numbers as the API's call of the same run (which builds RunSettings too)
    result = mt.teleportation(Quadratic(n=4, d=4, sigma2=10.0, zeta2=10.0), nodes=4, k=2,
                              rounds=12, lr=0.05, log_every=4, target=1e-3)
    assert len(calls) == 2 and calls[1] == ("teleportation", 2, None)
    assert without_time(read_jsonl(tmp_path / "metrics.jsonl")) == without_time(result.records)


def test_the_mpi_command_line_runs_through_train(tmp_path, mpirun):
    script = tmp_path / "spy.py"
    script.write_text(SPY)
    proc = mpirun(4, [str(script), *FLAGS, "--out", str(tmp_path / "mpi")],
                  timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    seen = sorted(json.loads(line[6:]) for line in proc.stdout.splitlines()
                  if line.startswith("CALLS "))
    assert seen == [[rank, 0, [["teleportation", 2, True]]] for rank in range(4)]
    assert sim_main(["--nodes", "4", *FLAGS, "--out", str(tmp_path / "sim")]) == 0
    assert (without_time(read_jsonl(tmp_path / "mpi" / "metrics.jsonl"))
            == without_time(read_jsonl(tmp_path / "sim" / "metrics.jsonl")))


def _names_in_code(path, name: str) -> bool:
    """Whether the code of ``path`` names ``name``: a variable, attribute, parameter,
    keyword or field of that name, or the string ``name`` itself (a row, a dict key);
    docstrings and comments, which explain, do not count."""
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and node.id == name:
            return True
        if isinstance(node, ast.Attribute) and node.attr == name:
            return True
        if isinstance(node, (ast.arg, ast.keyword)) and node.arg == name:
            return True
        if isinstance(node, ast.Constant) and node.value == name:
            return True
    return False


def test_a_setting_lives_in_few_modules():
    """A setting is defined, checked and spelt in session/settings.py, taken as a keyword in
    session/keywords.py, and read, by the same name, where it acts: no module in between
    names it (DESIGN §6.1a: how to add a setting)."""
    package = ROOT / "mpi_teleport"
    for name in ("keep_checkpoints", "checkpoint_every", "log_every", "compute_time"):
        users = sorted(str(p.relative_to(package)) for p in package.rglob("*.py")
                       if p.parent.name != "examples"  # (users of the API, not its plumbing)
                       and _names_in_code(p, name))
        assert len(users) <= 5, (name, users)


def test_a_cross_setting_rule_is_written_once_and_spelt_by_its_front_end():
    """The command line's resolve and the API's checks call the same rule functions of
    session/settings.py; only the spelling of the settings differs."""
    import pytest

    from mpi_teleport.errors import API, CLI, UsageError
    from mpi_teleport.session.settings import check_elastic_runs_one_k, check_fail_plan, check_spares

    cases = [(check_spares, (1, False, False), "--spares needs --elastic (MPI) or --fail",
              "spares= needs elastic=True (MPI) or fail="),
             (check_fail_plan, (True, True), "--fail is the simulator's failure plan; under "
              "MPI, --elastic detects", "fail is the simulator's failure plan; under MPI, "
              "elastic detects"),
             (check_elastic_runs_one_k, (True,), "not --k auto; choose k", "not search_k; choose k")]
    for rule, args, cli_words, api_words in cases:
        for naming, words in ((CLI, cli_words), (API, api_words)):
            with pytest.raises(UsageError) as caught:
                rule(*args, naming)
            assert words in str(caught.value)
    check_spares(1, True, False, API)  # (allowed: nothing raised)
    check_fail_plan(True, False, CLI)
    with pytest.raises(UsageError, match="--k auto"):  # the command line reaches the same rule
        from mpi_teleport.session.settings import resolve

        resolve({"nodes": 4, "k": "auto", "algorithm": "teleportation", "fail": ("1@2",)})


def test_the_engine_takes_the_prepared_settings_whole():
    """engine.execute(problem, run, backend, recorder): the run's prepared settings as one
    object (a RunSettings, or anything with its fields: engine.RunPlan), no keyword per
    setting; the same records as the API's."""
    from mpi_teleport.core.spec import Logging, RunSpec
    from mpi_teleport.disk.output import RunFiles
    from mpi_teleport.session.runner import RunSettings
    from mpi_teleport.problem import with_defaults
    from mpi_teleport.runtime import engine
    from mpi_teleport.runtime.backends.local import LocalBackend
    from mpi_teleport.runtime.metrics import Recorder

    problem = with_defaults(Quadratic(n=6, d=4))
    spec, logging = RunSpec("teleportation", 6, 2, 9, 0.05), Logging(log_every=3, target=None)
    seen = []
    run = RunSettings(spec, logging, callback=lambda record: seen.append(record["round"]))
    backend = LocalBackend(problem, spec)
    result = engine.execute(problem, run, backend, Recorder(spec, logging, problem,
                                                            RunFiles(None)))
    backend.close()
    api = mt.teleportation(Quadratic(n=6, d=4), nodes=6, k=2, rounds=9, lr=0.05, log_every=3)
    assert without_time(result.records) == without_time(api.records)
    assert seen == [0, 3, 6, 9]  # (the run's callback, read from the settings)


def test_both_front_ends_build_the_run_spec_by_one_builder(monkeypatch):
    """The command line and the API build a run's RunSpec by the one builder
    (session/build.py's run_spec, from checked values named as the table's rows): the same
    settings give equal specs, Nesterov's momentum, topology, variant and seed included;
    a row's default fills what the values do not hold."""
    from mpi_teleport.core.spec import RunSpec
    from mpi_teleport.session import build
    from mpi_teleport.session.disk_check import Places
    from mpi_teleport.session.settings import setting

    specs = []
    real = mt.api.train

    def spy(problem, settings, comm=None, context=None):
        specs.append(settings.spec)
        return real(problem, settings, comm, context)

    monkeypatch.setattr(mt.api, "train", spy)
    given = ["--nodes", "6", "--momentum", "0.5", "--nesterov", "--topology", "exp",
             "--seed", "3", "--variant", "simple"]
    assert sim_main([*FLAGS, *given]) == 0
    mt.teleportation(Quadratic(n=6, d=4, seed=3), nodes=6, k=2, rounds=12, lr=0.05,
                     momentum=0.5, nesterov=True, topology="exp", seed=3,
                     variant="simple", log_every=4)
    assert sim_main(["--nodes", "6", *FLAGS[2:], "--algorithm", "dsgd"]) == 0
    mt.dsgd(Quadratic(n=6, d=4), nodes=6, rounds=12, lr=0.05, log_every=4)
    cli, api, cli_dsgd, api_dsgd = specs
    assert cli == api and float(cli.momentum) == 0.5 and cli.moves == "simple"
    assert cli_dsgd == api_dsgd and cli_dsgd.k == 6
    assert build.run_spec({"algorithm": "teleportation", "nodes": 4, "k": 2, "rounds": 5,
                           "lr": 0.1}) == RunSpec("teleportation", 4, 2, 5, 0.1)
    # the defaults a hand-built RunSettings and a Places fall back on are the table's
    assert mt.RunSettings(RunSpec("dsgd", 4, 4, 5, 0.1)).logging.log_every == \
        setting("log_every").default
    assert (Places().every, Places().keep) == (setting("checkpoint_every").default,
                                               setting("keep_checkpoints").default)
