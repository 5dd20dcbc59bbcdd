"""One settings table (issue 44): a setting is a row of ``session/settings.py``'s
``SETTINGS``, and everything else follows from the row: the command line's flag and the
``--config`` key, the rule the API's keywords are checked by, config.json and a
checkpoint's manifest, the comparison a resume makes, and the ranks' start-up agreement.
Also: both front ends give a setting one meaning (``eval_every``), the optimizer from the
command line equals ``optimizer=`` record for record, ``mt.train`` checks what it is
handed, and a RunSettings holds values, never a live handle."""
from __future__ import annotations

import dataclasses
import functools
import json

import pytest

import mpi_teleport as mt
from mpi_teleport.core.spec import Logging, RunSpec
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.errors import API, CLI
from mpi_teleport.session import settings as table
from mpi_teleport.session.runner import RunContext, RunSettings
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from helpers import MEAN_PROBLEM_SOURCE, ROOT, without_time

SMALL = ["--nodes", "4", "--k", "2", "--dim", "4", "--lr", "0.05", "--log-every", "2",
         "--algorithm", "teleportation", "--progress", "off"]

# A setting that exists only in this test: one row, nothing else.
TEA = table.Setting("tea", "green", "choice", "the tea the nodes drink (a test's row)",
                    table.choice(("green", "black")), ("green", "black"), record="when set")


@pytest.fixture
def tea(monkeypatch):
    monkeypatch.setattr(table, "SETTINGS", table.SETTINGS + (TEA,))


def test_a_row_alone_makes_a_setting_of_both_front_ends(tea, tmp_path, capsys):
    from mpi_teleport.front import cli

    parser = cli.build_parser("prog", "")
    assert "--tea" in parser.format_help()
    (tmp_path / "t.toml").write_text('tea = "black"\nnodes = 4\n')
    assert cli.parse(parser, ["--config", str(tmp_path / "t.toml")]).tea == "black"
    assert cli.parse(parser, ["--nodes", "4", "--tea", "black"]).tea == "black"
    assert cli.parse(parser, ["--nodes", "4"]).tea == "green"  # (its one default)
    # the API's keywords are checked by the same rule, spelt as keywords
    assert table.check_values({"tea": "black"}, API) == {"tea": "black"}
    with pytest.raises(mt.UsageError, match=r"^tea: unknown value 'red'; choose one of green"):
        table.check_values({"tea": "red"}, API)
    with pytest.raises(mt.UsageError, match=r"--tea: unknown value 'red'"):
        cli.parse(parser, ["--nodes", "4", "--tea", "red"])
    # config.json records it when set (records written before it existed stay the same)
    run = tmp_path / "run"
    assert sim_main([*SMALL, "--rounds", "8", "--tea", "black", "--checkpoint-every", "4",
                     "--out", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["tea"] == "black"
    assert sim_main([*SMALL, "--rounds", "4", "--out", str(tmp_path / "plain")]) == 0
    assert "tea" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    # a resume must match it (the row says so), and inherits it when not given
    capsys.readouterr()
    assert sim_main(["--resume", str(run), "--rounds", "12", "--tea", "green"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--tea 'black', not 'green'" in err and len(err.splitlines()) == 1
    assert sim_main(["--resume", str(run), "--rounds", "12", "--progress", "off"]) == 0
    assert json.loads((run / "config.json").read_text())["tea"] == "black"


AGREE = """
import json, sys
from mpi_teleport.session import settings as table
table.SETTINGS = table.SETTINGS + (table.Setting("tea", "green", "choice", "a test's row",
                                   table.choice(("green", "black")), ("green", "black")),)
from mpi4py import MPI
from mpi_teleport.run import main
extra = ["--tea", "black"] if MPI.COMM_WORLD.Get_rank() == 1 else []
sys.exit(main(sys.argv[1:] + extra))
"""


def test_the_ranks_agree_on_a_row_they_were_not_told_of(tmp_path, mpirun):
    script = tmp_path / "agree.py"
    script.write_text(AGREE)
    proc = mpirun(2, [str(script), "--rounds", "2", "--dim", "4", "--algorithm",
                      "teleportation", "--k", "1"], timeout=90, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "tea = 'black' on rank 1, 'green' on rank 0" in proc.stderr


def test_eval_every_means_the_same_on_both_front_ends(tmp_path):
    """Evaluate every R rounds, record every --log-every (the records between carry the
    training values): the API's meaning, which the command line's --eval-every now has."""
    assert sim_main([*SMALL, "--rounds", "12", "--eval-every", "4", "--out",
                     str(tmp_path / "cli")]) == 0
    api = mt.teleportation(Quadratic(n=4, d=4, sigma2=10.0, zeta2=10.0), nodes=4, k=2,
                           rounds=12, lr=0.05, log_every=2, eval_every=4, target=1e-3,
                           out=tmp_path / "api")
    cli_records = read_jsonl(tmp_path / "cli" / "metrics.jsonl")
    assert without_time(cli_records) == without_time(api.records)
    assert [r["round"] for r in cli_records] == [0, 2, 4, 6, 8, 10, 12]
    assert [("error" in r) for r in cli_records] == [True, False, True, False, True, False, True]
    for where in ("cli", "api"):
        config = json.loads((tmp_path / where / "config.json").read_text())
        assert (config["log_every"], config["eval_every"]) == (2, 4), where


def _adamw():
    torch = pytest.importorskip("torch")
    return functools.partial(torch.optim.AdamW, lr=0.05, weight_decay=0.05, betas=(0.8, 0.99))


ADAMW = ["--optimizer", "adamw", "--weight-decay", "0.05", "--betas", "0.8,0.99"]


def test_the_command_lines_optimizer_equals_the_apis(tmp_path):
    """--optimizer adamw with its options: the simulator's command line equals the API
    (records and the optimizer's description); under MPI the command line equals the
    simulator's: tests/in_rank/test_command_line_mpi.py."""
    optimizer = _adamw()
    api = mt.teleportation(Quadratic(n=4, d=4, sigma2=10.0, zeta2=10.0), nodes=4, k=2,
                           rounds=12, lr=0.05, log_every=2, target=1e-3, optimizer=optimizer,
                           out=tmp_path / "api")
    assert sim_main([*SMALL, *ADAMW, "--rounds", "12", "--out", str(tmp_path / "sim")]) == 0
    assert without_time(read_jsonl(tmp_path / "sim" / "metrics.jsonl")) == without_time(api.records)
    described = json.loads((tmp_path / "api" / "config.json").read_text())["optimizer"]
    assert described.startswith("AdamW(betas=(0.8, 0.99)")
    assert json.loads((tmp_path / "sim" / "config.json").read_text())["optimizer"] == described


def test_the_command_lines_nesterov_equals_the_apis(tmp_path):
    assert sim_main([*SMALL, "--rounds", "8", "--momentum", "0.5", "--nesterov", "--out",
                     str(tmp_path / "cli")]) == 0
    api = mt.teleportation(Quadratic(n=4, d=4, sigma2=10.0, zeta2=10.0), nodes=4, k=2,
                           rounds=8, lr=0.05, log_every=2, target=1e-3, momentum=0.5,
                           nesterov=True, out=tmp_path / "api")
    assert without_time(read_jsonl(tmp_path / "cli" / "metrics.jsonl")) == without_time(
        api.records)
    for where in ("cli", "api"):
        assert json.loads((tmp_path / where / "config.json").read_text())["nesterov"] is True


def test_both_front_ends_record_a_setting_alike(tmp_path):
    """One builder of RunSettings and one record (session/build.py's build and record) for
    both front ends: a setting both hold is recorded alike in config.json and in a
    checkpoint's manifest (the places each writes to aside)."""
    assert sim_main([*SMALL, "--rounds", "8", "--sigma2", "10", "--zeta2", "10",
                     "--eval-every", "4", "--checkpoint-every", "4",
                     "--out", str(tmp_path / "cli")]) == 0
    mt.teleportation(Quadratic(n=4, d=4, sigma2=10.0, zeta2=10.0), nodes=4, k=2, rounds=8,
                     lr=0.05, log_every=2, eval_every=4, target=1e-3, checkpoint_every=4,
                     out=tmp_path / "api")
    places = {"out", "checkpoint_dir", "progress"}  # (where each wrote; off or False)
    for name in ("config.json", "checkpoints/round-00000008/MANIFEST.json"):
        cli, api = (json.loads((tmp_path / where / name).read_text())
                    for where in ("cli", "api"))
        cli, api = (record.get("config", record) for record in (cli, api))
        both = (set(cli) & set(api)) - places
        assert {"nodes", "algorithm", "k", "rounds", "lr", "momentum", "topology", "seed",
                "log_every", "eval_every", "target", "latency", "checkpoint_every",
                "problem", "dim", "sigma2", "zeta2", "resume", "elastic",
                "spares"} <= both, name
        assert {n: cli[n] for n in both} == {n: api[n] for n in both}, name


def test_an_api_checkpoint_recorded_before_the_one_record_resumes(tmp_path):
    """API manifests written before the one record (issue 44) lack the settings the API
    held but did not record (eval_every, resume, progress, elastic, spares): such a
    checkpoint resumes on both front ends to the uninterrupted run's records."""
    run = tmp_path / "run"
    mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=6, lr=0.05, log_every=3,
                     out=run, checkpoint_every=3, keep_checkpoints=5)
    for manifest in run.glob("checkpoints/round-*/MANIFEST.json"):
        data = json.loads(manifest.read_text())
        for name in ("eval_every", "resume", "progress", "elastic", "spares"):
            del data["config"][name]
        manifest.write_text(json.dumps(data))
    whole = mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=9, lr=0.05,
                             log_every=3)
    resumed = mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=9, lr=0.05,
                               log_every=3, resume=run / "checkpoints" / "round-00000003")
    assert without_time(resumed.records) == without_time(whole.records)
    assert sim_main(["--resume", str(run / "checkpoints" / "round-00000006"), "--rounds",
                     "9", "--out", str(tmp_path / "cli"), "--progress", "off"]) == 0
    assert without_time(read_jsonl(tmp_path / "cli" / "metrics.jsonl"))[-1] == without_time(
        whole.records)[-1]


def test_the_command_line_resumes_an_api_runs_failure_plan(tmp_path, capsys):
    """The API records the failure plan as the command line spells it (NODE@ROUND), so
    --resume of an API run takes it from the manifest and goes on to the records of the
    uninterrupted run; another plan given is refused in one line."""
    run, plan = tmp_path / "run", [(1, 3), "4@2"]
    mt.teleportation(Quadratic(n=6, d=4), nodes=6, k=2, rounds=8, lr=0.05, log_every=2,
                     fail=plan, out=run, checkpoint_every=4)
    assert json.loads((run / "config.json").read_text())["fail"] == ["4@2", "1@3"]
    capsys.readouterr()
    assert sim_main(["--resume", str(run), "--rounds", "10", "--fail", "2@3"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--fail ['4@2', '1@3'], not ['2@3']" in err and len(err.splitlines()) == 1
    with pytest.raises(mt.UsageError, match=r"fail=\['4@2', '1@3'\], not \['2@3'\]"):
        mt.teleportation(Quadratic(n=6, d=4), nodes=6, k=2, rounds=10, lr=0.05,
                         fail=["2@3"], resume=run)
    assert sim_main(["--resume", str(run), "--rounds", "10", "--progress", "off"]) == 0
    whole = mt.teleportation(Quadratic(n=6, d=4), nodes=6, k=2, rounds=10, lr=0.05,
                             log_every=2, fail=plan)
    assert without_time(read_jsonl(run / "metrics.jsonl")) == without_time(whole.records)


def test_a_resume_compares_the_optimizer(tmp_path, capsys):
    """Issue 50, class 1: a checkpoint written with AdamW resumed with another optimizer or
    none is refused in one line on both front ends; with the same one it goes on."""
    optimizer = _adamw()
    import torch

    run = tmp_path / "run"
    mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=6, lr=0.05, log_every=3,
                     optimizer=optimizer, out=run, checkpoint_every=3)
    for other in (None, torch.optim.SGD, functools.partial(torch.optim.Adam, lr=0.05)):
        with pytest.raises(mt.UsageError, match="optimizer='AdamW") as caught:
            mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=9, lr=0.05,
                             optimizer=other, resume=run)
        assert "\n" not in str(caught.value)
    capsys.readouterr()
    assert sim_main(["--resume", str(run), "--rounds", "9", "--optimizer", "sgd"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--optimizer 'AdamW(" in err and len(err.splitlines()) == 1
    # the command line continues the API's AdamW run (the flags come from its manifest)
    assert sim_main(["--resume", str(run), "--rounds", "9", "--progress", "off"]) == 0
    whole = mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=9, lr=0.05,
                             log_every=3, optimizer=optimizer)
    assert without_time(read_jsonl(run / "metrics.jsonl")) == without_time(whole.records)


def test_threads_gives_a_torch_problem_its_threads(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from mpi_teleport.examples.custom_model import problem
    from mpi_teleport.session.prepare import with_threads

    built = problem(nodes=2)
    with_threads(built, 3)
    assert built.torch_settings.threads == 3 and not built.torch_settings.auto
    with_threads(built, "auto")
    assert built.torch_settings.auto
    flags = ["--problem", "mpi_teleport.examples.custom_model:problem", "--nodes", "2", "--k",
             "1", "--rounds", "2", "--algorithm", "teleportation", "--progress", "off"]
    assert sim_main([*flags, "--threads", "1", "--out", str(tmp_path / "one")]) == 0
    assert sim_main([*flags, "--out", str(tmp_path / "own")]) == 0  # (the problem's own: 1)
    assert (without_time(read_jsonl(tmp_path / "one" / "metrics.jsonl"))
            == without_time(read_jsonl(tmp_path / "own" / "metrics.jsonl")))
    assert json.loads((tmp_path / "one" / "config.json").read_text())["threads"] == 1
    assert "threads" not in json.loads((tmp_path / "own" / "config.json").read_text())


# ----------------------------------------------------------------------------- mt.train
@pytest.mark.parametrize("settings,says", [
    (lambda: "teleportation", "settings: expected mpi_teleport.RunSettings"),
    (lambda: RunSettings(spec="teleportation"), "RunSettings.spec: expected a RunSpec"),
    (lambda: RunSettings(RunSpec("frobnicate", 4, 2, 20, 0.1)),
     "algorithm: unknown value 'frobnicate'; choose one of teleportation, dsgd, search"),
    (lambda: RunSettings(RunSpec("teleportation", 4, 2, -5, -0.1)),
     "rounds must be at least 1, got -5"),
    (lambda: RunSettings(RunSpec("teleportation", 4, 9, 5, 0.1)),
     "k=9 exceeds the number of nodes 4"),
    (lambda: RunSettings(RunSpec("dsgd", 4, 4, 5, 0.1), logging=Logging(log_every=0)),
     "log_every must be at least 1, got 0"),
], ids=["not-settings", "spec-a-string", "unknown-algorithm", "negative-rounds", "k-above-n",
        "log-every-zero"])
def test_train_checks_what_it_is_handed(settings, says):
    with pytest.raises(mt.UsageError) as caught:
        mt.train(Quadratic(n=4, d=2), settings())
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_train_refuses_a_comm_that_is_not_a_communicator():
    settings = RunSettings(RunSpec("teleportation", 4, 2, 5, 0.1))
    with pytest.raises(mt.UsageError, match="comm: expected an mpi4py communicator"):
        mt.train(Quadratic(n=4, d=2), settings, "COMM_WORLD")


def test_run_settings_hold_values_and_no_live_handle():
    names = {f.name for f in dataclasses.fields(RunSettings)}
    assert not names & {"terminator", "pool", "files", "meeting", "refused", "joining"}
    # (a refusal is agreed before the run, prepare.agreed_settings_from_keywords: no handle)
    assert {"terminator", "pool", "files", "meeting", "joining"} <= {
        f.name for f in dataclasses.fields(RunContext)}
    settings = RunSettings(RunSpec("teleportation", 4, 2, 5, 0.1))
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.progress = True  # type: ignore[misc]
    changed = dataclasses.replace(settings, progress=True)
    assert changed.progress and not settings.progress
    # deeply frozen: what config.json and a checkpoint keep, nested values included
    made = mt.RunSettings.from_args(["--nodes", "4", "--k", "2", "--algorithm", "dsgd",
                                     "--rounds", "5", "--fail", "1@2", "--progress", "off"],
                                    problem=Quadratic(n=4, d=2))
    assert made.record["fail"] == ["1@2"] and made.manifest["nodes"] == 4
    for change in (lambda: made.record.update(nodes=5), lambda: made.record["fail"].append("2@3"),
                   lambda: made.manifest.pop("nodes")):
        with pytest.raises(TypeError, match="RunSettings are frozen"):
            change()
    assert json.loads(json.dumps(made.record)) == made.record


def test_every_row_is_complete_and_written_once():
    names = [row.name for row in table.SETTINGS]
    assert len(names) == len(set(names))
    for row in table.SETTINGS:
        assert row.help and row.record in ("always", "when set", "no"), row.name
        assert row.kind in ("int", "float", "str", "choice", "bool", "k", "path", "problem",
                            "fails", "betas", "threads"), row.name
        if row.rule is not None and row.default is not None and row.kind != "k":
            assert row.rule(row.default, row.name, CLI) == row.default, row.name
    assert table.Values.of_job().to_dict() == table.defaults()


WRONG_ON_ONE_RANK = """
import sys
from mpi4py import MPI
import mpi_teleport as mt
from mpi_teleport.core.spec import Logging, RunSpec
from mpi_teleport.problems.quadratic import Quadratic
comm = MPI.COMM_WORLD
rounds = -5 if comm.Get_rank() == 1 else 5
try:
    mt.train(Quadratic(n=2, d=2), mt.RunSettings(RunSpec("teleportation", 2, 1, rounds, 0.1)),
             comm)
    print("RAN", flush=True)
except mt.UsageError as exc:
    print("REFUSED " + str(exc), flush=True)
"""


def test_a_wrong_setting_on_one_rank_is_refused_on_every_rank(tmp_path, mpirun):
    script = tmp_path / "wrong.py"
    script.write_text(WRONG_ON_ONE_RANK)
    proc = mpirun(2, [str(script)], timeout=90, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = sorted(line for line in proc.stdout.splitlines() if line.startswith("REFUSED"))
    assert lines == ["REFUSED rounds must be at least 1, got -5 (on rank 1 only)"] * 2


ONE_RANK_ENV = """
import os, sys
name, value = sys.argv[1].split("=", 1)
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 1:
    os.environ[name] = value
from mpi_teleport.run import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("setting", ["MPI_TELEPORT_PIECE_PEERS=all",
                                     "MPI_TELEPORT_PIECE_BYTES=0"])
def test_a_piece_setting_on_one_rank_is_agreed_before_it_decides_a_collective(
        tmp_path, mpirun, setting):
    """Issue 50, class 4: the rank set apart would skip the allgather of host names the
    others run; the ranks agree on the settings in that one collective instead."""
    script = tmp_path / "env.py"
    script.write_text(ONE_RANK_ENV)
    proc = mpirun(2, [str(script), setting, "--rounds", "2", "--dim", "4", "--algorithm",
                      "teleportation", "--k", "1"], timeout=90, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    ours = [line for line in proc.stderr.splitlines() if "mpi_teleport.run: error:" in line]
    assert len(ours) == 1 and f"{setting.split('=')[0]} (" in ours[0], proc.stderr
    assert "differs between ranks" in ours[0] and "Traceback" not in proc.stderr


# ----------------------------------------------------------------------------- the manual
PAGE = ROOT / "docs" / "reference" / "settings.md"
MARK = "<!-- the table: generated from SETTINGS by `python tests/test_settings_table.py` -->\n"


def reference_page() -> str:
    """docs/reference/settings.md as the table writes it (its prose, then the table)."""
    import inspect

    keywords = set()
    for function in (mt.teleportation, mt.dsgd, mt.search_k):
        keywords |= set(inspect.signature(function).parameters)
    text = PAGE.read_text()
    return text[:text.index(MARK) + len(MARK)] + "\n" + table.reference(keywords)


def test_the_manuals_settings_page_is_the_table():
    assert PAGE.read_text() == reference_page(), (
        "docs/reference/settings.md is not the settings table: run "
        "python tests/test_settings_table.py")


if __name__ == "__main__":  # rewrite the manual's table from SETTINGS
    PAGE.write_text(reference_page())


API_ONE_RANK_ENV = """
import os
from mpi4py import MPI
if MPI.COMM_WORLD.Get_rank() == 1:
    os.environ["MPI_TELEPORT_PIECE_PEERS"] = "all"
import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
try:
    mt.teleportation(Quadratic(n=2, d=2), nodes=2, k=1, rounds=3, lr=0.1, comm=MPI.COMM_WORLD)
    print("RAN", flush=True)
except mt.UsageError as exc:
    print("REFUSED " + str(exc), flush=True)
"""


def test_the_api_agrees_on_a_piece_setting_on_one_rank_too(tmp_path, mpirun):
    script = tmp_path / "api_env.py"
    script.write_text(API_ONE_RANK_ENV)
    proc = mpirun(2, [str(script)], timeout=90, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED")]
    assert len(refused) == 2 and len(set(refused)) == 1, proc.stdout
    assert "MPI_TELEPORT_PIECE_PEERS (" in refused[0]


def test_the_command_lines_one_entry_gives_a_values_view(tea, tmp_path):
    """cli.from_args(argv, toml) is the command lines' documented entry: flags over the
    TOML file over the table's defaults, frozen Values that only view the values
    (what the ranks agree on and what a problem is built from are functions of the
    values, beside the table and the problem factory, not methods of it)."""
    from mpi_teleport.front import cli
    from mpi_teleport.problems import problem_settings

    toml = tmp_path / "t.toml"
    toml.write_text('tea = "black"\nnodes = 4\nalpha = 0.5\n')
    cfg = cli.from_args(["--k", "2"], toml)
    assert (cfg.tea, cfg.nodes, cfg.k) == ("black", 4, 2)
    assert cli.from_args(["--tea", "green"], toml).tea == "green"  # (flags win)
    assert cfg == cli.from_args(["--config", str(toml), "--k", "2"])
    with pytest.raises(mt.UsageError, match=r"^--tea: unknown value 'red'"):
        cli.from_args(["--nodes", "4", "--tea", "red"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.nodes = 5  # type: ignore[misc]
    assert not hasattr(table.Values, "agreed") and not hasattr(table.Values, "problem_settings")
    values = cfg.to_dict()
    assert table.agreed(values) == {s.name: values[s.name] for s in table.rows() if s.agree}
    assert "tea" in table.agreed(values) and "progress" not in table.agreed(values)
    built = problem_settings(values, table.defaults())
    assert (built.nodes, built.alpha, built.given) == (4, 0.5, ("nodes", "alpha"))


# A problem that counts epochs (n_train, batch_size), built by a factory the command line
# names (--problem MODULE:FUNCTION); numpy only.
EPOCHS_PROBLEM = MEAN_PROBLEM_SOURCE + '''
def data(nodes, seed, batch_size=10):
    return Mean(nodes, batch_size)
'''


@pytest.fixture
def epochs_problem(tmp_path, monkeypatch):
    import importlib
    import sys

    from mpi_teleport.problems import factory

    (tmp_path / "epochs_problem.py").write_text(EPOCHS_PROBLEM)
    monkeypatch.syspath_prepend(str(tmp_path))
    factory._BUILT.clear()
    sys.modules.pop("epochs_problem", None)
    yield importlib.import_module("epochs_problem")
    sys.modules.pop("epochs_problem", None)
    factory._BUILT.clear()


def test_the_authors_warmup_cosine_from_the_command_line(tmp_path, epochs_problem, capsys):
    """Issue 46's schedule on the command line (--lr-schedule cosine-warmup,
    --warmup-epochs W): two table rows and the spec builder; the run equals the API's
    lr=cosine_with_warmup(...) record for record, config.json records it, a resume goes
    on with it and is refused in one line with another warm-up; without --epochs, or a
    warm-up without the schedule, one line too."""
    from mpi_teleport.problems.authors_recipe import cosine_with_warmup

    flags = ["--problem", "epochs_problem:data", "--nodes", "4", "--k", "2", "--algorithm",
             "teleportation", "--lr", "0.1", "--log-every", "1", "--progress", "off",
             "--lr-schedule", "cosine-warmup", "--warmup-epochs", "1"]
    run = tmp_path / "run"
    # 120 samples / (batch 10 * k 2) = 6 rounds an epoch: 2 epochs, 12 rounds
    assert sim_main([*flags, "--epochs", "2", "--checkpoint-every", "6", "--out", str(run)]) == 0
    config = json.loads((run / "config.json").read_text())
    assert (config["lr_schedule"], config["warmup_epochs"], config["lr"]) == (
        "cosine-warmup", 1, 0.1)
    capsys.readouterr()
    assert sim_main(["--resume", str(run), "--epochs", "2", "--warmup-epochs", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--warmup-epochs" in err, err
    import shutil

    newest = sorted((run / "checkpoints").glob("round-*"))
    assert [p.name for p in newest] == ["round-00000006", "round-00000012"]
    shutil.rmtree(newest[-1])  # (as if stopped after round 6: the warm-up's epoch is over)
    assert sim_main(["--resume", str(run), "--epochs", "2", "--progress", "off"]) == 0
    assert f"resuming {run} from round 6 of 12" in capsys.readouterr().err
    assert (run / "checkpoints" / "round-00000012").is_dir()
    whole = mt.teleportation(epochs_problem.data(4, 0), nodes=4, k=2, epochs=2,
                             lr=cosine_with_warmup(0.1, 2, 6, warmup_epochs=1), log_every=1)
    assert without_time(read_jsonl(run / "metrics.jsonl")) == without_time(whole.records)
    constant = mt.teleportation(epochs_problem.data(4, 0), nodes=4, k=2, epochs=2, lr=0.1,
                                log_every=1)
    assert without_time(constant.records) != without_time(whole.records)
    for bad, says in ((["--rounds", "5"], "--lr-schedule cosine-warmup needs --epochs"),
                      (["--epochs", "1", "--warmup-epochs", "-1"],
                       "--warmup-epochs must be >= 0"),
                      (["--epochs", "1", "--lr-schedule", "constant"],
                       "--warmup-epochs is --lr-schedule cosine-warmup's")):
        assert sim_main([*flags, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and says in err, err


def test_the_authors_warmup_cosine_under_mpi_equals_the_simulator(tmp_path, mpirun,
                                                                   epochs_problem):
    """--lr-schedule cosine-warmup under mpirun -n 4: every rank builds the same schedule
    from the same rows (and agrees on them), so the records equal the simulator's."""
    import os

    flags = ["--problem", "epochs_problem:data", "--k", "2", "--algorithm", "teleportation",
             "--lr", "0.1", "--log-every", "1", "--progress", "off", "--epochs", "2",
             "--lr-schedule", "cosine-warmup", "--warmup-epochs", "1"]
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = mpirun(4, ["-m", "mpi_teleport.run", *flags, "--out", str(tmp_path / "mpi")],
                  env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sim_main(["--nodes", "4", *flags, "--out", str(tmp_path / "sim")]) == 0
    assert (without_time(read_jsonl(tmp_path / "mpi" / "metrics.jsonl"))
            == without_time(read_jsonl(tmp_path / "sim" / "metrics.jsonl")))
    assert json.loads((tmp_path / "mpi" / "config.json").read_text())["warmup_epochs"] == 1


def test_run_settings_from_the_command_lines_flags(tmp_path, capsys):
    """mt.RunSettings.from_args (issue 44): a script takes the command lines' flags (over a
    TOML file) for its own problem and runs them with mt.train, record for record what
    the simulator's command line runs; a job of two runs, a problem-building flag and
    bad input are one UsageError each, spelt as flags."""
    (tmp_path / "r.toml").write_text('lr = 0.05\nlog-every = 2\n')
    flags = ["--nodes", "4", "--k", "2", "--rounds", "8", "--dim", "4", "--algorithm",
             "teleportation", "--progress", "off"]
    assert sim_main([*flags, "--config", str(tmp_path / "r.toml"), "--out",
                     str(tmp_path / "cli")]) == 0
    script = flags[:6] + flags[8:]  # (--dim builds the command line's problem: not here)

    def problem():  # (what the command line builds of those flags)
        return Quadratic(n=4, d=4, sigma2=10.0, zeta2=10.0)

    settings = mt.RunSettings.from_args([*script, "--out", str(tmp_path / "api")],
                                        tmp_path / "r.toml", problem=problem())
    assert isinstance(settings, mt.RunSettings) and settings.spec.tokens == 2
    mt.train(problem(), settings)
    assert without_time(read_jsonl(tmp_path / "api" / "metrics.jsonl")) == \
        without_time(read_jsonl(tmp_path / "cli" / "metrics.jsonl"))
    recorded = json.loads((tmp_path / "api" / "config.json").read_text())
    assert (recorded["problem"], recorded["dim"], recorded["lr"]) == ("quadratic", 4, 0.05)
    for argv, says in [(["--nodes", "4"], r"^--algorithm compare runs two methods"),
                       ([*script, "--sigma2", "1"], r"^--sigma2: RunSettings.from_args runs"),
                       ([*script, "--lr", "-1"], r"^--lr must be"),
                       ([*script, "--resume", str(tmp_path / "none")], r"^--resume")]:
        with pytest.raises(mt.UsageError, match=says):
            mt.RunSettings.from_args(argv, problem=problem())


def test_both_front_ends_make_a_run_by_one_preparation(monkeypatch):
    """The command lines and the API make every run's RunSettings by the one
    session/prepare.py prepare(problem, values, comm, prepared=...), from the same kind of
    checked values (settings.Values; Config, settings_of and checked_settings are gone)."""
    import mpi_teleport.session.prepare as preparation
    from mpi_teleport.session import api_checks
    from mpi_teleport.front import cli

    seen = []
    real = preparation.prepare

    def spy(problem, values, comm=None, **kwargs):
        seen.append((type(values), values.naming))
        return real(problem, values, comm, **kwargs)

    # (the API's keywords reach it through prepare.settings_from_keywords, a command line's
    # run through front/cli.run_one)
    monkeypatch.setattr("mpi_teleport.session.prepare.prepare", spy)
    assert sim_main([*SMALL, "--rounds", "4"]) == 0
    mt.teleportation(Quadratic(n=4, d=4), nodes=4, k=2, rounds=4, lr=0.05)
    assert seen == [(table.Values, CLI), (table.Values, API)]
    for gone in ("settings_of", "checked_settings", "Config"):
        assert not any(hasattr(m, gone) for m in (cli, api_checks, table, preparation)), gone
