"""The trace never overwrites the run's own files, keeps a finished run's trace on a rerun,
checks its buffer against the memory, and ``python -m mpi_teleport.trace`` checks its input
and flags: each a one-line refusal, status 2 (command line) or a UsageError (API)."""
from __future__ import annotations

import json

import pytest

import mpi_teleport as mt
from mpi_teleport.problems.quadratic import Quadratic
from mpi_teleport.sim import main as sim_main
from mpi_teleport.trace import tracer as tracing
from mpi_teleport.trace.__main__ import main as trace_main

RUN = ["--nodes", "4", "--k", "2", "--algorithm", "teleportation", "--rounds", "6",
       "--dim", "3", "--progress", "off"]


@pytest.fixture(autouse=True)
def _no_trace_from_env(monkeypatch, tmp_path):
    monkeypatch.delenv(tracing.TRACE_ENV, raising=False)
    monkeypatch.delenv(tracing.ROUNDS_ENV, raising=False)
    monkeypatch.setattr(tracing, "_written", set())
    monkeypatch.chdir(tmp_path)


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("trace, words", [
    ("o/metrics.jsonl", "one of the run's own files"),
    ("o/summary.json", "one of the run's own files"),
    ("o/config.json", "one of the run's own files"),
    ("o/checkpoints/t.json", "inside the run's checkpoint directory"),
    ("o/checkpoints", "inside the run's checkpoint directory"),
])
def test_a_trace_path_that_is_one_of_the_runs_outputs_is_refused(tmp_path, capsys, trace, words):
    assert sim_main([*RUN, "--out", "o", "--checkpoint-every", "3", "--trace", trace]) == 2
    line = one_line(capsys)
    assert words in line and trace in line
    assert not (tmp_path / "o" / "metrics.jsonl").exists()
    with pytest.raises(mt.UsageError, match=words) as got:
        mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=6, lr=0.01, out="a",
                         checkpoint_every=3, trace=trace.replace("o/", "a/"))
    assert "\n" not in str(got.value)
    # beside them, under another name, it is the trace's own
    assert sim_main([*RUN, "--out", "o", "--checkpoint-every", "3", "--trace", "o/t.json"]) == 0
    assert json.loads((tmp_path / "o" / "metrics.jsonl").read_text().splitlines()[0])["round"] == 0


def test_compare_refuses_its_comparison_file_as_a_trace(capsys):
    flags = [a for a in RUN if a != "teleportation"]
    flags[flags.index("--algorithm") + 1:flags.index("--algorithm") + 1] = ["compare"]
    assert sim_main([*flags, "--out", "c", "--trace", "c/comparison.json"]) == 2
    assert "one of the run's own files" in one_line(capsys)


def test_a_finished_runs_trace_is_kept_on_a_rerun(tmp_path):
    cli = [*RUN, "--out", "r", "--checkpoint-every", "3", "--trace", "t.json", "--resume", "auto"]
    assert sim_main(cli) == 0
    written = (tmp_path / "t.json").read_bytes()
    assert len(json.loads(written)["traceEvents"]) > 10
    assert sim_main(cli) == 0  # finished: returned, its trace as it was
    assert (tmp_path / "t.json").read_bytes() == written
    api = dict(nodes=4, k=2, rounds=6, lr=0.01, out="ra", checkpoint_every=3, resume="auto")
    mt.teleportation(Quadratic(n=4, d=3), trace="ta.json", **api)
    written = (tmp_path / "ta.json").read_bytes()
    tracing._written.clear()  # (as a fresh process would)
    mt.teleportation(Quadratic(n=4, d=3), trace="ta.json", **api)
    assert (tmp_path / "ta.json").read_bytes() == written


def test_a_trace_buffer_beyond_the_memory_is_one_line(monkeypatch, capsys):
    monkeypatch.setenv(tracing.ROUNDS_ENV, str(10**13))
    assert sim_main([*RUN[:-4], "--rounds", str(10**11), "--progress", "off",
                     "--trace", "t.json"]) == 2
    line = one_line(capsys)
    assert f"{tracing.ROUNDS_ENV}=10000000000000" in line and "GiB of memory here" in line
    with pytest.raises(mt.UsageError, match="more than the .* GiB of memory here"):
        mt.teleportation(Quadratic(n=4, d=3), nodes=4, k=2, rounds=10**11, lr=0.01,
                         trace="a.json")
    with pytest.raises(mt.UsageError, match="needs about"):
        tracing.check_buffer(10**6, 1, 10**6, available=10**6)
    tracing.check_buffer(10, 1, 10**6, available=10**9)  # fits


@pytest.mark.parametrize("content, words", [
    ('{"traceEvents": 5}', "traceEvents is not a list of events"),
    ('{"traceEvents": [{"ph": "X", "name": "step", "ts": 0, "dur": 1}]}', "event 0 ('X') has no 'pid'"),
    ('{"traceEvents": [{"ph": "X", "pid": 0, "name": "step", "ts": "soon", "dur": 1}]}',
     "event 0 ('X') is not a trace event"),
    ('{"traceEvents": [3]}', "event 0 is not an object"),
    ("[1, 2]", "no traceEvents"),
    ('{"otherData": {}}', "no traceEvents"),
    ("not json", "not a readable trace file"),
])
def test_the_trace_tool_checks_that_its_input_is_a_trace(tmp_path, capsys, content, words):
    (tmp_path / "bad.json").write_text(content)
    assert trace_main([str(tmp_path / "bad.json")]) == 2
    line = one_line(capsys)
    assert words in line and "bad.json: not a readable trace file" in line


@pytest.mark.parametrize("rounds", ["-1", "0"])
def test_the_trace_tool_refuses_a_drawing_of_no_rounds(tmp_path, capsys, rounds):
    assert trace_main([str(tmp_path / "any.json"), "--rounds", rounds, "--png", "x.png"]) == 2
    assert f"--rounds {rounds}: give a whole number >= 1" in one_line(capsys)
    assert not (tmp_path / "x.png").exists()
