"""A script keeps its own command line (issue 57), in-process on the simulator:

* ``mt.add_arguments`` puts the package's flags into a script's ``argparse`` parser
  beside its own (a flag the script has already stays the script's and feeds the
  setting of that name; ``prefix=`` keeps both), ``RunSettings.from_namespace`` runs
  them, Python objects over them by keyword; ``from_args(known_only=True)`` returns the
  rest; ``comm="auto"``;
* ``--optimizer`` any torch.optim class by name (or a dotted third-party class) with
  ``--optimizer-args``, and ``--lr-scheduler StepLR``, equal the keyword API record for
  record, are recorded and compared on resume;
* ``--epochs`` and ``--batch-size`` on a TorchProblem (honoured, or refused in one line);
* ``--resume auto`` twice through a script and through the command line; a checkpoint
  the API wrote resumes through a script given the same problem, and is refused for
  another;
* records exactly at epoch ends, saying the epoch and the step within it.

Under MPI: tests/in_rank/test_command_line_mpi.py (by name equals the keywords under
``mpirun -n 4``) and tests/test_ports.py (the argparse port of pytorch/examples'
mnist/main.py alone and under ``launch -n 4``)."""
import argparse
import functools
import json

import pytest

torch = pytest.importorskip("torch")

import mpi_teleport as mt  # noqa: E402
from helpers import without_time  # noqa: E402
from mpi_teleport.disk.output import read_jsonl  # noqa: E402
from torch_toys import Lion, blobs, net  # noqa: E402

pytestmark = pytest.mark.torch
RUN = ["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--progress", "off"]


def problem(batch_size=8, seed=0):
    return mt.TorchProblem(net, blobs(96), test=blobs(30, seed=1), nodes=4, seed=seed,
                           batch_size=batch_size)


def records(result):
    return without_time(result.records)


def script_parser():
    """A script's own flags, four of them named as the package's."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gamma", type=float, default=0.7)  # (the script's own)
    return parser


def test_the_packages_flags_join_a_scripts_parser():
    parser = script_parser()
    group = mt.add_arguments(parser)
    assert "add_arguments" in mt.__all__ and group.title == "mpi_teleport"
    args = parser.parse_args(["--lr", "0.5", "--k", "2", "--gamma", "0.9", "--trace", "t.json"])
    assert (args.lr, args.k, args.gamma, args.trace) == (0.5, "2", 0.9, "t.json")
    assert not hasattr(args, "rounds")  # (not given: the defaults and a TOML file apply)
    assert not any(a.option_strings == ["--problem"] for a in parser._actions)  # (builds one)
    prefixed = script_parser()
    mt.add_arguments(prefixed, prefix="mt")
    args = prefixed.parse_args(["--lr", "0.5", "--mt-lr", "0.25", "--mt-k", "2"])
    assert (args.lr, args.mt_lr, args.mt_k) == (0.5, 0.25, "2")
    # --rounds given beats the script's --epochs left at its default; given, --epochs wins
    for argv, rounds in ((["--rounds", "3"], 3), (["--rounds", "3", "--epochs", "1"], 6)):
        parser = script_parser()
        mt.add_arguments(parser)
        settings = mt.RunSettings.from_namespace(parser.parse_args([*RUN, *argv]),
                                                 problem=problem())
        assert settings.spec.rounds == rounds
    with pytest.raises(mt.UsageError, match="^RunSettings.from_namespace: the namespace was not"):
        mt.RunSettings.from_namespace(argparse.Namespace(lr=1.0), problem=problem())


def test_a_scripts_flags_and_the_packages_feed_one_run(tmp_path):
    """The script's --lr/--epochs/--batch-size/--seed are the run's; its --gamma its own,
    handed as a scheduler by keyword; the run equals the keyword API record for record."""
    parser = script_parser()
    mt.add_arguments(parser)
    args = parser.parse_args([*RUN, "--log-every", "2", "--gamma", "0.5", "--out",
                              str(tmp_path / "ns")])
    seen = []
    settings = mt.RunSettings.from_namespace(
        args, problem=problem(), comm="auto", optimizer=torch.optim.Adadelta,
        lr=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=args.gamma),
        callback=seen.append)
    got = mt.train(problem(), settings, "auto")
    api = mt.teleportation(problem(), nodes=4, k=2, epochs=2, log_every=2,
                           optimizer=functools.partial(torch.optim.Adadelta, lr=1.0),
                           lr=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1,
                                                gamma=0.5))
    assert records(got) == records(api) and seen == got.records
    assert got.summary["rounds_run"] == 12  # (2 epochs of 96 samples, 2 x 8 a round)
    config = json.loads((tmp_path / "ns" / "config.json").read_text())
    assert config["optimizer"].startswith("Adadelta(") and "StepLR" in config["lr"]
    # known_only: the script's own flags come back; comm="auto" outside a launcher
    settings, rest = mt.RunSettings.from_args([*RUN, "--rounds", "3", "--subset", "30"],
                                              problem=problem(), comm="auto", known_only=True)
    assert rest == ["--subset", "30"] and settings.spec.rounds == 3
    with pytest.raises(mt.UsageError, match=r"^unrecognized arguments: --subset 30"):
        mt.RunSettings.from_args([*RUN, "--rounds", "3", "--subset", "30"], problem=problem())


NAMED = ["--epochs", "2", "--lr", "1.0", "--optimizer", "adadelta", "--optimizer-args",
         "rho=0.95,eps=1e-6", "--lr-scheduler", "StepLR", "--lr-scheduler-args",
         "step_size=1,gamma=0.7", "--log-every", "3"]


def test_any_torch_optimizer_and_scheduler_by_name_equal_the_keywords(tmp_path):
    by_name = mt.train(problem(), mt.RunSettings.from_args(
        [*RUN, *NAMED, "--out", str(tmp_path / "named")], problem=problem()))
    keywords = mt.teleportation(
        problem(), nodes=4, k=2, epochs=2, log_every=3,
        optimizer=functools.partial(torch.optim.Adadelta, lr=1.0, rho=0.95, eps=1e-6),
        lr=functools.partial(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.7),
        out=tmp_path / "api")
    assert records(by_name) == records(keywords)
    named = json.loads((tmp_path / "named" / "config.json").read_text())
    api = json.loads((tmp_path / "api" / "config.json").read_text())
    assert named["optimizer"] == api["optimizer"] and "rho=0.95" in named["optimizer"]
    assert (named["optimizer_args"], named["lr_scheduler"], named["lr_scheduler_args"]) == \
        ("rho=0.95,eps=1e-6", "StepLR", "step_size=1,gamma=0.7")
    # a third-party class by its dotted path, stepped per round
    dotted = mt.train(problem(), mt.RunSettings.from_args(
        [*RUN, "--rounds", "6", "--lr", "0.01", "--optimizer", "torch_toys.Lion",
         "--optimizer-args", "betas=(0.8, 0.95)", "--lr-scheduler", "exponentiallr",
         "--lr-scheduler-args", "gamma=0.9", "--lr-scheduler-interval", "round",
         "--log-every", "2"], problem=problem()))
    lion = mt.teleportation(problem(), nodes=4, k=2, rounds=6, log_every=2, lr_step="round",
                            optimizer=functools.partial(Lion, lr=0.01, betas=(0.8, 0.95)),
                            lr=functools.partial(torch.optim.lr_scheduler.ExponentialLR,
                                                 gamma=0.9))
    assert records(dotted) == records(lion) and dotted.records[-1]["lr"] < 0.01


def test_bad_names_and_arguments_are_one_line_each():
    for argv, says in [
            (["--optimizer", "adadeltaa"], r"^--optimizer adadeltaa: no such class in torch.optim"),
            (["--optimizer", "torch_toys.blobs"], r"^--optimizer torch_toys.blobs: not a torch"),
            (["--optimizer", "adadelta", "--optimizer-args", "rho=0.9,rhoo=1"],
             r"^--optimizer-args: Adadelta refuses them \(got an unexpected keyword"),
            (["--optimizer", "adadelta", "--optimizer-args", "0.9"],
             r"^--optimizer-args '0.9': expected key=value pairs"),
            (["--lr-scheduler", "StepLR"],
             r"^lr=StepLR: building the scheduler on the optimizer raised TypeError"),
            (["--lr-scheduler", "warmup"], r"^--lr-scheduler warmup: no such class")]:
        with pytest.raises(mt.UsageError, match=says) as caught:
            mt.RunSettings.from_args([*RUN, "--rounds", "2", *argv], problem=problem())
        assert "\n" not in str(caught.value)
    from mpi_teleport.problems.quadratic import Quadratic

    with pytest.raises(mt.UsageError, match=r"^--optimizer adadelta: Quadratic computes with "
                                            r"numpy; a torch optimizer by name"):
        mt.RunSettings.from_args([*RUN, "--rounds", "2", "--optimizer", "adadelta"],
                                 problem=Quadratic(n=4, d=3))


def test_epochs_and_batch_size_on_a_torch_problem():
    settings = mt.RunSettings.from_args([*RUN, "--epochs", "1.5", "--batch-size", "12"],
                                        problem=problem(batch_size=12))
    assert settings.spec.rounds == 6  # (ceil(1.5 * 96 / (12 * 2)))
    with pytest.raises(mt.UsageError, match=r"^--batch-size 32: the problem draws batches of "
                                            r"8 \(it was built with batch_size=8\)"):
        mt.RunSettings.from_args([*RUN, "--epochs", "1", "--batch-size", "32"],
                                 problem=problem())
    from mpi_teleport.problems.quadratic import Quadratic

    with pytest.raises(mt.UsageError, match=r"^--epochs needs a problem that knows its "
                                            r"training-set size"):
        mt.RunSettings.from_args([*RUN, "--epochs", "1"], problem=Quadratic(n=4, d=3))


def test_resume_auto_through_a_script_and_an_api_checkpoint(tmp_path):
    """--resume auto twice through from_args (a fresh run, then the finished run
    returned as it ended); a checkpoint the API wrote resumes through the script given
    the same problem (--resume auto finds it, --resume DIR continues it), and another
    problem is refused in one line."""
    out = tmp_path / "run"
    flags = [*RUN, "--lr", "0.1", "--log-every", "2", "--checkpoint-every", "2"]
    whole = mt.teleportation(problem(), nodes=4, k=2, rounds=8, lr=0.1, log_every=2)
    auto = [*flags, "--rounds", "8", "--out", str(out), "--resume", "auto"]
    first = mt.train(problem(), mt.RunSettings.from_args(auto, problem=problem()))
    again = mt.train(problem(), mt.RunSettings.from_args(auto, problem=problem()))
    assert records(first) == records(whole) and records(again)[-1] == records(whole)[-1]
    api = tmp_path / "api"
    mt.teleportation(problem(), nodes=4, k=2, rounds=4, lr=0.1, log_every=2, out=api,
                     checkpoint_every=2)
    found = mt.train(problem(), mt.RunSettings.from_args(
        [*flags, "--rounds", "4", "--out", str(api), "--resume", "auto"], problem=problem()))
    assert records(found)[-1] == records(whole)[3]  # (round 4: the API's finished run)
    resumed = [*flags, "--rounds", "8", "--out", str(api), "--resume", str(api)]
    mt.train(problem(), mt.RunSettings.from_args(resumed, problem=problem()))
    assert without_time(read_jsonl(api / "metrics.jsonl")) == records(whole)
    with pytest.raises(mt.UsageError, match=r"^--resume .*: the checkpoint was written with "
                                            r"a problem with problem_facts"):
        mt.RunSettings.from_args(resumed, problem=problem(seed=5))


def test_records_fall_at_epoch_ends_and_say_where_they_are():
    """96 samples, 2 nodes x 10 a round: epochs end at rounds 5, 10, 15 (not every 4.8);
    every record says the epoch its batches belong to, the step within it and its end."""
    seen = []
    result = mt.train(problem(batch_size=10), mt.RunSettings.from_args(
        [*RUN, "--epochs", "3", "--log-every", "100", "--log-every-epochs", "1",
         "--eval-every", "100", "--lr", "0.1"], problem=problem(batch_size=10),
        callback=lambda r: seen.append(r["epoch_end"])))
    where = [(r["round"], r["train_epoch"], r["epoch_step"], r["epoch_end"], "loss" in r)
             for r in result.records]
    assert where == [(0, 0, 0, False, True), (1, 1, 1, False, False), (5, 1, 5, True, False),
                     (10, 2, 5, True, False), (15, 3, 5, True, True)]
    assert seen == [False, False, True, True, True]
    evaluated = mt.teleportation(problem(batch_size=10), nodes=4, k=2, epochs=3, lr=0.1,
                                 log_every=3, eval_every_epochs=1)
    assert [r["round"] for r in evaluated.records if "loss" in r] == [0, 5, 10, 15]


def test_the_command_line_resumes_an_optimizer_and_scheduler_by_name(tmp_path, capsys):
    """python -m mpi_teleport.sim with --optimizer adadelta and --lr-scheduler StepLR:
    --resume auto run twice (a fresh run, then the finished one reported), and --resume
    DIR without the flags takes them from the checkpoint and continues to the
    uninterrupted run's records."""
    pytest.importorskip("sklearn")
    from mpi_teleport.sim import main as sim_main

    flags = ["--problem", "digits", *RUN, "--lr", "1.0", "--optimizer", "adadelta",
             "--optimizer-args", "rho=0.95", "--lr-scheduler", "StepLR",
             "--lr-scheduler-args", "step_size=2,gamma=0.5", "--lr-scheduler-interval",
             "round", "--log-every", "2", "--checkpoint-every", "2"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    for _ in range(2):
        assert sim_main([*flags, "--rounds", "6", "--out", str(whole), "--resume", "auto"]) == 0
    assert "finished at round 6" in capsys.readouterr().err
    assert sim_main([*flags, "--rounds", "4", "--out", str(part)]) == 0
    assert sim_main(["--resume", str(part), "--rounds", "6", "--progress", "off"]) == 0
    assert without_time(read_jsonl(part / "metrics.jsonl")) == \
        without_time(read_jsonl(whole / "metrics.jsonl"))
    assert sim_main(["--resume", str(part), "--rounds", "6", "--optimizer", "adam"]) == 2
    assert "the checkpoint was written with --optimizer" in capsys.readouterr().err


def test_the_mnist_port_names_adadelta_and_steplr_as_its_keywords_build_them(tmp_path,
                                                                            monkeypatch):
    """pytorch/examples' mnist/main.py ported with its own argparse: Adadelta and StepLR
    by name on its command line equal them by keyword (its default), record for record
    (alone and under launch -n 4: tests/test_ports.py)."""
    pytest.importorskip("torchvision")
    from mpi_teleport.examples import mnist_main_port

    monkeypatch.chdir(tmp_path)
    flags = ["--fake-data", "64", "--epochs", "1", "--batch-size", "16", "--log-interval",
             "1", "--progress", "off", "--gamma", "0.5"]
    named = ["--optimizer", "Adadelta", "--lr-scheduler", "steplr", "--lr-scheduler-args",
             "step_size=1,gamma=0.5"]
    assert mnist_main_port.main([*flags, "--out", "keywords"]) == 0
    assert mnist_main_port.main([*flags, *named, "--out", "names"]) == 0
    assert without_time(read_jsonl(tmp_path / "names" / "metrics.jsonl")) == \
        without_time(read_jsonl(tmp_path / "keywords" / "metrics.jsonl"))
