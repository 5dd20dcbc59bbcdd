"""Bad inputs and faults, one table: each row is a command, the exit status it must end
with, the start of (or a phrase in) its one line on stderr, and the files that must come
out untouched. No row may print a traceback, a warning or a second line. Simulator rows
call ``python -m mpi_teleport.sim``'s main() in this process (stderr captured at the file
descriptor, warnings recorded), ``ckpt`` rows that of ``python -m mpi_teleport.checkpoint``;
rows marked ``process`` run as a real interpreter under a timeout (one of each kind of
fault: a path, a deep TOML file in a fresh interpreter, a lock another process holds, a
torch-loading data set, the checkpoint program). The same faults under MPI are rows of
tests/test_failures.py's table (one MPI job, under Open MPI and MPICH).

Placeholders in a command: ``{base}`` is the table's scratch directory (also the working
directory), ``{good}`` a run with complete checkpoints, ``{name}`` any file a row's
``setup`` made.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from mpi_teleport.disk import lock
from mpi_teleport import sim
from mpi_teleport.checkpoint.__main__ import main as checkpoint_main
from helpers import ROOT

SIM = ["-m", "mpi_teleport.sim"]
SMALL = ["--nodes", "4", "--k", "2", "--rounds", "2", "--algorithm", "teleportation"]
LONG_NAME = "n" * 300


@dataclass
class Case:
    id: str
    args: list  # after the program
    status: int = 2
    says: str | None = None  # a phrase of the one line (None: no line expected)
    where: str = "sim"  # sim | ckpt
    setup: str | None = None  # a function of SETUPS, run before the command
    untouched: list = field(default_factory=list)  # paths under {base} that must not change
    timeout: float = 60
    starts: str | None = None  # the line must start with this
    process: bool = False  # run as a real interpreter (else main() in this process)


# ----------------------------------------------------------------------------- set-ups
def _copy_good(base: Path, name: str, source: str = "good") -> Path:
    target = base / name
    if not target.exists():
        shutil.copytree(base / source, target)
    return target


def _round(run: Path) -> Path:
    return sorted((run / "checkpoints").glob("round-*"))[-1]


def _edit_manifest(base, name, change):
    ck = _round(_copy_good(base, name))
    path = ck / "MANIFEST.json"
    data = json.loads(path.read_text())
    result = change(data, ck)
    if isinstance(result, str):
        path.write_text(result)
    else:
        path.write_text(json.dumps(data))


def _as_tokens(base: Path, name: str, source: str = "good") -> Path:
    """A copy of a good run in the MPI layout (one token-*.npz per token)."""
    ck = _round(_copy_good(base, name, source))
    manifest = json.loads((ck / "MANIFEST.json").read_text())
    x = np.load(ck / "x.npy")
    for m in range(len(x)):
        np.savez(ck / f"token-{m:06d}.npz", x=x[m])
    (ck / "x.npy").unlink()
    manifest.update(layout="tokens", arrays=["x"])
    (ck / "MANIFEST.json").write_text(json.dumps(manifest))
    return ck


def _write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


SETUPS = {
    "empty_csv": lambda b: _write(b / "empty.csv", ""),
    "comments_csv": lambda b: _write(b / "comments.csv", "# only a comment\n"),
    "huge_csv": lambda b: _write(b / "huge.csv", "\n".join(",".join(
        "0" if i == j else ("9e12" if (i, j) == (1, 2) else "5") for j in range(4)) for i in range(4))),
    "ragged_csv": lambda b: _write(b / "ragged.csv", "0,1,2\n1,0,2\n"),
    "words_csv": lambda b: _write(b / "words.csv", "a,b\nc,d\n"),
    "binary_csv": lambda b: _write(b / "binary.csv", b"\xff\xfe\x00\x01" * 10),
    "a_file": lambda b: _write(b / "a_file", "not a directory\n"),
    "nul_toml": lambda b: _write(b / "nul.toml", 'out = "x\\u0000y"\nnodes = 4\nk = 2\n'),
    "long_toml": lambda b: _write(b / "long.toml", f'checkpoint-dir = "{LONG_NAME}"\n'
                                                   f'checkpoint-every = 1\nnodes = 4\nk = 2\n'),
    "latin1_toml": lambda b: _write(b / "latin1.toml", "lr = 0.1 # caf\xe9\n".encode("latin-1")),
    "deep_toml": lambda b: _write(b / "deep.toml", "x = " + "[" * 100000 + "]" * 100000 + "\n"),
    "dir_toml": lambda b: (b / "dir.toml").mkdir(exist_ok=True),
    "link_to_both2": lambda b: ((b / "both2").mkdir(exist_ok=True),
                                (b / "link_to_both2").symlink_to(b / "both2")),
    # damaged simulator checkpoints (copies of the good run)
    "ck_truncated": lambda b: _truncate(_round(_copy_good(b, "ck_truncated")) / "x.npy"),
    "ck_empty": lambda b: _write(_round(_copy_good(b, "ck_empty")) / "x.npy", b""),
    "ck_pickled": lambda b: _write(_round(_copy_good(b, "ck_pickled")) / "x.npy",
                                   pickle.dumps({"x": [1.0, 2.0]})),
    "ck_object": lambda b: np.save(_round(_copy_good(b, "ck_object")) / "x.npy",
                                   np.array([[1.0, "a"]] * 2, dtype=object), allow_pickle=True),
    "ck_shape": lambda b: np.save(_round(_copy_good(b, "ck_shape")) / "x.npy", np.zeros((2, 7))),
    "ck_rows": lambda b: np.save(_round(_copy_good(b, "ck_rows")) / "x.npy", np.zeros((3, 50))),
    "ck_text": lambda b: np.save(_round(_copy_good(b, "ck_text")) / "x.npy",
                                 np.array([["a"] * 50] * 2)),
    "ck_round_str": lambda b: _edit_manifest(b, "ck_round_str", lambda d, _: d.update(round="10")),
    "ck_round_neg": lambda b: _edit_manifest(b, "ck_round_neg", lambda d, _: d.update(round=-10)),
    "ck_round_other": lambda b: _edit_manifest(b, "ck_round_other", lambda d, _: d.update(round=4)),
    "ck_round_bool": lambda b: _edit_manifest(b, "ck_round_bool", lambda d, _: d.update(round=True)),
    "ck_k_float": lambda b: _edit_manifest(b, "ck_k_float", lambda d, _: d.update(k=2.0)),
    "ck_n_str": lambda b: _edit_manifest(b, "ck_n_str", lambda d, _: d.update(n="4")),
    "ck_dim_neg": lambda b: _edit_manifest(b, "ck_dim_neg", lambda d, _: d.update(dim=-1)),
    "ck_arrays_path": lambda b: _edit_manifest(b, "ck_arrays_path",
                                               lambda d, _: d.update(arrays=["../../x"])),
    "ck_arrays_str": lambda b: _edit_manifest(b, "ck_arrays_str", lambda d, _: d.update(arrays="x")),
    "ck_layout": lambda b: _edit_manifest(b, "ck_layout", lambda d, _: d.update(layout="zip")),
    "ck_config_list": lambda b: _edit_manifest(b, "ck_config_list", lambda d, _: d.update(config=[1])),
    "ck_recorder_str": lambda b: _edit_manifest(b, "ck_recorder_str",
                                                lambda d, _: d.update(recorder="x")),
    "ck_clocks": lambda b: _edit_manifest(b, "ck_clocks", lambda d, _: d.update(clocks_us=["a"])),
    "ck_format": lambda b: _edit_manifest(b, "ck_format", lambda d, _: d.update(format=99)),
    "ck_format1": lambda b: _edit_manifest(b, "ck_format1", lambda d, _: d.update(format=1)),
    "ck_not_json": lambda b: _edit_manifest(b, "ck_not_json", lambda d, _: "{not json"),
    "ck_list": lambda b: _edit_manifest(b, "ck_list", lambda d, _: "[1, 2]"),
    "ck_no_round": lambda b: _edit_manifest(b, "ck_no_round", lambda d, _: d.pop("round")),
    # damaged MPI-layout checkpoints
    "tk_truncated": lambda b: _truncate(_as_tokens(b, "tk_truncated") / "token-000001.npz"),
    "tk_empty": lambda b: _write(_as_tokens(b, "tk_empty") / "token-000000.npz", b""),
    "tk_pickled": lambda b: _write(_as_tokens(b, "tk_pickled") / "token-000000.npz",
                                   pickle.dumps({"x": 1})),
    "tk_object": lambda b: np.savez(_as_tokens(b, "tk_object") / "token-000000.npz",
                                    x=np.array([None] * 50, dtype=object)),
    "tk_shape": lambda b: np.savez(_as_tokens(b, "tk_shape") / "token-000001.npz", x=np.zeros(3)),
    "tk_lacks": lambda b: np.savez(_as_tokens(b, "tk_lacks") / "token-000001.npz", y=np.zeros(50)),
    "tk_missing": lambda b: (_as_tokens(b, "tk_missing") / "token-000001.npz").unlink(),
    # where a resume writes
    "apart": lambda b: _run_sim(b, [*SMALL, "--rounds", "4", "--checkpoint-every", "2", "--out",
                                    "apart/out", "--checkpoint-dir", "apart/ck"]),
    "other_run": lambda b: _run_sim(b, [*SMALL, "--rounds", "4", "--checkpoint-every", "2",
                                        "--out", "other_run"]),
    "foreign_lock": lambda b: _write(b / "foreign" / lock.RUN_LOCK, json.dumps(
        {"host": "another-host.example", "pid": 1, "started": "2026-01-01T00:00:00Z"})),
}


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _env():
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="default")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run_sim(base: Path, args: list) -> None:
    with contextlib.chdir(base), contextlib.redirect_stdout(None):
        assert sim.main(args) == 0


# ----------------------------------------------------------------------------- the table
def _damaged(name: str, says: str, where: str = "sim") -> Case:
    args = (["--resume", f"{{base}}/{name}", "--rounds", "20"] if where == "sim" else
            ["--resume", f"{{base}}/{name}", "--rounds", "20"])
    return Case(f"{where}-{name}", args, 2, says, where, setup=name, untouched=[name])


CASES = [
    # paths the operating system will not take
    Case("out-name-too-long", [*SMALL, "--out", LONG_NAME], says="longer than the 255",
         process=True),
    Case("out-path-too-long", [*SMALL, "--out", "/".join(["d" * 200] * 25)],
         says="longer than the 4095"),
    Case("out-nul-from-toml", ["--config", "nul.toml", "--rounds", "2"], says="NUL byte",
         setup="nul_toml"),
    Case("checkpoint-dir-long-from-toml", ["--config", "long.toml", "--rounds", "2"],
         says="longer than the 255", setup="long_toml"),
    Case("out-in-proc", [*SMALL, "--out", "/proc/x"], says="takes no new directories"),
    Case("checkpoint-dir-in-proc", [*SMALL, "--checkpoint-dir", "/proc/x/y",
                                    "--checkpoint-every", "1"], says="takes no new directories"),
    Case("out-in-sys", [*SMALL, "--out", "/sys/x"], says="takes no new directories"),
    Case("out-is-a-file", [*SMALL, "--out", "a_file"], says="exists and is not a directory",
         setup="a_file", untouched=["a_file"]),
    Case("out-under-a-file", [*SMALL, "--out", "a_file/x"], says="is not a directory",
         setup="a_file", untouched=["a_file"]),
    Case("out-no-such-user", [*SMALL, "--out", "~nosuchuser/x"], says="no such user"),
    Case("resume-missing", ["--resume", "nowhere"], says="no such directory"),
    Case("resume-a-file", ["--resume", "a_file"], says="not a directory", setup="a_file"),
    # latency
    Case("latency-no-such-user", [*SMALL, "--latency", "matrix:~nosuchuser/x.csv"],
         says="no such user"),
    Case("latency-empty-matrix", [*SMALL, "--latency", "matrix:empty.csv"],
         says="holds no numbers", setup="empty_csv"),
    Case("latency-comments-only", [*SMALL, "--latency", "matrix:comments.csv"],
         says="holds no numbers", setup="comments_csv"),
    Case("latency-ragged-matrix", [*SMALL, "--latency", "matrix:ragged.csv"],
         says="not square", setup="ragged_csv"),
    Case("latency-words", [*SMALL, "--latency", "matrix:words.csv"], says="not a numeric CSV",
         setup="words_csv"),
    Case("latency-binary", [*SMALL, "--latency", "matrix:binary.csv"], says="not a numeric CSV",
         setup="binary_csv"),
    Case("latency-huge-entry", [*SMALL, "--latency", "matrix:huge.csv"],
         says="more than a run can wait for", setup="huge_csv"),
    Case("latency-const-hours", [*SMALL, "--latency", "const:5000000000"],
         says="more than a run can wait for"),
    Case("latency-mod-hours", [*SMALL, "--latency", "mod:200000000"],
         says="more than a run can wait for"),
    Case("latency-bw-tiny", [*SMALL, "--latency", "const:5,bw:0.0000000001"],
         says="cannot be waited for"),
    Case("latency-control-character", [*SMALL, "--latency", "matrix:a\x01b"], says="not found"),
    Case("latency-empty", [*SMALL, "--latency", ""], says="--latency is empty"),
    # sizes that cannot fit
    Case("dim-too-large", [*SMALL, "--dim", "10000000000"], says="GiB"),
    Case("dsgd-too-many-tokens", ["--nodes", "100000000", "--dim", "1000", "--rounds", "2",
                                  "--algorithm", "dsgd"], says="GiB"),
    Case("batch-size-absurd", [*SMALL, "--problem", "digits", "--batch-size", "1000000000000"],
         says="GiB", timeout=120),
    Case("more-nodes-than-samples", ["--problem", "digits", "--nodes", "2000", "--k", "4",
                                     "--rounds", "2", "--algorithm", "teleportation"],
         says="too few for 2000 nodes", timeout=120),
    Case("nodes-1e12-refused", ["--nodes", "1000000000000", "--algorithm", "teleportation",
                                "--k", "4"], says="normal draws", timeout=30),
    Case("nodes-1e12-zeta0-starts", ["--nodes", "1000000000000", "--algorithm", "teleportation",
                                     "--k", "4", "--zeta2", "0", "--rounds", "3"], status=0,
         timeout=30),
    # TOML files
    Case("toml-not-utf8", ["--config", "latin1.toml", *SMALL], says="UTF-8", setup="latin1_toml"),
    Case("toml-deep", ["--config", "deep.toml", *SMALL], says="deep", setup="deep_toml",
         process=True),
    Case("toml-directory", ["--config", "dir.toml", *SMALL], says="directory", setup="dir_toml"),
    # data
    Case("data-dir-missing", [*SMALL, "--problem", "fashion-mnist", "--data-dir", "nodata"],
         says="does not exist"),
    # checkpoint flags
    Case("keep-zero", [*SMALL, "--out", "k0", "--checkpoint-every", "1", "--keep-checkpoints", "0"],
         says="--keep-checkpoints must be at least 1"),
    Case("every-without-place", [*SMALL, "--checkpoint-every", "1"], says="needs a place"),
    # locks: another job holds the directory
    Case("lock-out-held", [*SMALL, "--out", "held"], says="is in use by pid",
         setup="hold:held", untouched=["held"], process=True),
    Case("lock-checkpoint-dir-held", [*SMALL, "--checkpoint-dir", "held_ck",
                                      "--checkpoint-every", "1"],
         says="is already held by this process",  # (held by the test's own process)
         setup="hold:held_ck", untouched=["held_ck"]),
    # one directory for both (issue 31, class 6): one lock, not a refusal naming our own pid
    Case("out-is-checkpoint-dir", [*SMALL, "--out", "both", "--checkpoint-dir", "both",
                                   "--checkpoint-every", "1"], status=0, says=None),
    Case("checkpoint-dir-is-out-through-a-link", [*SMALL, "--out", "both2", "--checkpoint-dir",
                                                  "link_to_both2", "--checkpoint-every", "1"],
         status=0, says=None, setup="link_to_both2"),
    Case("lock-other-host", [*SMALL, "--out", "foreign"], says="another-host.example",
         setup="foreign_lock", untouched=["foreign"]),
    # where a resume writes
    Case("resume-apart-needs-out", ["--resume", "apart/ck", "--rounds", "6"],
         says="kept its checkpoints apart", setup="apart", untouched=["apart"]),
    Case("resume-into-another-run", ["--resume", "{good}", "--rounds", "20", "--out", "other_run"],
         says="already holds checkpoints", setup="other_run", untouched=["other_run", "good"]),
    # damaged checkpoints (simulator layout)
    _damaged("ck_truncated", "x.npy cannot be read"),
    _damaged("ck_empty", "x.npy cannot be read"),
    _damaged("ck_pickled", "x.npy cannot be read"),
    _damaged("ck_object", "x.npy cannot be read"),
    _damaged("ck_shape", "expected (2, 50)"),
    _damaged("ck_rows", "expected (2, 50)"),
    _damaged("ck_text", "not numbers"),
    _damaged("ck_round_str", "field 'round' is '10'"),
    _damaged("ck_round_neg", "field 'round' is -10"),
    _damaged("ck_round_other", "says round 4 but the directory is named for round 10"),
    _damaged("ck_round_bool", "field 'round' is True"),
    _damaged("ck_k_float", "field 'k' is 2.0"),
    _damaged("ck_n_str", "field 'n' is '4'"),
    _damaged("ck_dim_neg", "field 'dim' is -1"),
    _damaged("ck_arrays_path", "field 'arrays'"),
    _damaged("ck_arrays_str", "field 'arrays'"),
    _damaged("ck_layout", "field 'layout'"),
    _damaged("ck_config_list", "field 'config'"),
    _damaged("ck_recorder_str", "field 'recorder'"),
    _damaged("ck_clocks", "clocks_us"),
    _damaged("ck_format", "format 99"),
    _damaged("ck_format1", "written by an earlier mpi_teleport (checkpoint format 1) whose "
                           "schedule (which node holds which token in each round) differs"),
    _damaged("ck_not_json", "not readable JSON"),
    _damaged("ck_list", "not a JSON object"),
    _damaged("ck_no_round", "lacks 'round'"),
    # damaged checkpoints (MPI layout, read by the simulator)
    _damaged("tk_truncated", "token-000001.npz cannot be read"),
    _damaged("tk_empty", "token-000000.npz cannot be read"),
    _damaged("tk_pickled", "token-000000.npz cannot be read"),
    _damaged("tk_object", "not numbers"),
    _damaged("tk_shape", "expected (50,)"),
    _damaged("tk_lacks", "lacks array 'x'"),
    _damaged("tk_missing", "missing"),
    # python -m mpi_teleport.checkpoint on bad manifests
    Case("show-round-str", ["show", "{base}/ck_round_str"], says="field 'round'", where="ckpt",
         setup="ck_round_str", untouched=["ck_round_str"], process=True),
    Case("show-not-json", ["show", "{base}/ck_not_json"], says="not readable JSON", where="ckpt",
         setup="ck_not_json", untouched=["ck_not_json"]),
    Case("newest-round-other", ["newest", "{base}/ck_round_other"], says="named for round 10",
         where="ckpt", setup="ck_round_other", untouched=["ck_round_other"]),
    Case("show-list", ["show", "{base}/ck_list"], says="not a JSON object", where="ckpt",
         setup="ck_list"),
    # python -m mpi_teleport.checkpoint used wrongly: one line, not argparse's usage block
    # and a line (issue 31, class 8)
    Case("ckpt-no-arguments", [], says="the following arguments are required: command, dir",
         where="ckpt", process=True),
    Case("ckpt-unknown-command", ["latest", "{good}"], says="invalid choice: 'latest'",
         where="ckpt"),
    Case("ckpt-no-dir", ["show"], says="required: dir", where="ckpt"),
    Case("ckpt-extra-argument", ["newest", "{good}", "{good}"], says="unrecognized arguments",
         where="ckpt"),
    Case("ckpt-unknown-flag", ["newest", "--all", "{good}"], says="unrecognized arguments: --all",
         where="ckpt"),
    # the optimizer and threads rows of the settings table (issue 44)
    Case("optimizer-unknown", [*SMALL, "--optimizer", "frobnicate"],
         says="--optimizer frobnicate: no such class in torch.optim; choose one of Adadelta,"),
    # any torch optimizer and scheduler by name, their arguments (issue 57)
    Case("optimizer-not-a-class", [*SMALL, "--optimizer", "os.path"],
         says="--optimizer os.path: not a torch.optim.Optimizer class"),
    Case("optimizer-by-name-numpy", [*SMALL, "--optimizer", "adadelta"],
         says="--optimizer adadelta: the quadratic problem computes with numpy"),
    Case("optimizer-args-unknown", [*SMALL, "--problem", "digits", "--optimizer", "Adadelta",
                                    "--optimizer-args", "rhoo=0.9"],
         says="--optimizer-args: Adadelta refuses them (got an unexpected keyword argument "
              "'rhoo'); it takes lr, rho, eps"),
    Case("optimizer-args-not-literal", [*SMALL, "--problem", "digits", "--optimizer",
                                        "adadelta", "--optimizer-args", "rho=high"],
         says="--optimizer-args 'rho=high': rho= is not a Python literal"),
    Case("optimizer-args-lr", [*SMALL, "--problem", "digits", "--optimizer", "adadelta",
                               "--optimizer-args", "lr=1.0"],
         says="--optimizer-args: lr= is the run's own setting; give it as --lr"),
    Case("optimizer-args-and-betas", [*SMALL, "--problem", "digits", "--optimizer", "adam",
                                      "--optimizer-args", "amsgrad=True", "--betas", "0.8,0.9"],
         says="--betas is for sgd, adam and adamw without --optimizer-args"),
    Case("lr-scheduler-unknown", [*SMALL, "--lr-scheduler", "steplr2"],
         says="--lr-scheduler steplr2: no such class in torch.optim.lr_scheduler"),
    Case("lr-scheduler-args-bad", [*SMALL, "--lr-scheduler", "StepLR", "--lr-scheduler-args",
                                   "gama=0.5"],
         says="--lr-scheduler-args: StepLR refuses them"),
    Case("lr-scheduler-args-alone", [*SMALL, "--lr-scheduler-args", "gamma=0.5"],
         says="--lr-scheduler-args is --lr-scheduler's"),
    Case("lr-scheduler-and-schedule", [*SMALL, "--lr-scheduler", "StepLR", "--lr-scheduler-args",
                                       "step_size=1", "--lr-schedule", "cosine"],
         says="--lr-scheduler StepLR and --lr-schedule cosine both set the step size"),
    Case("log-every-epochs-zero", [*SMALL, "--log-every-epochs", "0"],
         says="--log-every-epochs must be at least 1, got 0"),
    Case("log-every-epochs-quadratic", [*SMALL, "--log-every-epochs", "1"],
         says="--log-every-epochs: Quadratic does not know its epochs"),
    Case("betas-one-number", [*SMALL, "--optimizer", "adam", "--betas", "0.9"],
         says="--betas: expected two numbers B1,B2, got '0.9'"),
    Case("betas-out-of-range", [*SMALL, "--optimizer", "adam", "--betas", "0.9,1.5"],
         says="--betas must be in [0, 1), got 1.5"),
    Case("betas-with-sgd", [*SMALL, "--betas", "0.8,0.99"], says="--betas is Adam's"),
    Case("momentum-with-adam", [*SMALL, "--optimizer", "adamw", "--momentum", "0.9"],
         says="--momentum is SGD's"),
    Case("weight-decay-negative", [*SMALL, "--weight-decay", "-1"],
         says="--weight-decay must be >= 0, got -1.0"),
    Case("nesterov-without-momentum", [*SMALL, "--nesterov"], says="--nesterov"),
    Case("threads-zero", [*SMALL, "--problem", "digits", "--threads", "0"],
         says="--threads must be at least 1 (or auto), got 0"),
    Case("threads-word", [*SMALL, "--threads", "many"],
         says="--threads: expected an integer or 'auto', got 'many'"),
    Case("threads-on-numpy", [*SMALL, "--threads", "2"],
         says="the quadratic problem computes with numpy, not torch"),
    Case("eval-every-with-k-auto", ["--nodes", "4", "--k", "auto", "--eval-every", "5"],
         says="--eval-every is not taken by --k auto"),
]
def _fmnist_rows(name: str, override_of) -> None:
    from test_data_safety import _fmnist, _idx, _labels  # the data-safety tests' writers

    def setup(base: Path) -> None:
        _fmnist(base / name, **override_of(_idx, _labels))

    SETUPS[name] = setup


_fmnist_rows("fm_label_range", lambda idx, labels: {
    "train-labels-idx1-ubyte": idx(np.array([3] * 11 + [12], np.uint8))})
_fmnist_rows("fm_more_labels", lambda idx, labels: {"train-labels-idx1-ubyte": idx(labels(13))})
_fmnist_rows("fm_fewer_labels", lambda idx, labels: {"train-labels-idx1-ubyte": idx(labels(7))})
FM = ["--problem", "fashion-mnist", "--nodes", "2", "--k", "1", "--rounds", "1", "--algorithm",
      "teleportation", "--device", "cpu"]
CASES += [
    # data files whose contents disagree (see also tests/test_data_safety.py)
    Case("data-label-out-of-range", [*FM, "--data-dir", "fm_label_range"],
         says="label 12 of sample 11 is outside 0..9", setup="fm_label_range", timeout=240,
         untouched=["fm_label_range"], process=True),
    Case("data-more-labels-than-images", [*FM, "--data-dir", "fm_more_labels"],
         says="hold 13 labels for 12 images", setup="fm_more_labels", timeout=240,
         untouched=["fm_more_labels"]),
    Case("data-fewer-labels-than-images", [*FM, "--data-dir", "fm_fewer_labels"],
         says="hold 7 labels for 12 images", setup="fm_fewer_labels", timeout=240,
         untouched=["fm_fewer_labels"]),
]


# ----------------------------------------------------------------------------- running
def _snapshot(base: Path, names: list) -> dict:
    out = {}
    for name in names:
        root = base / name
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*"))
        for p in paths:
            key = str(p.relative_to(base))
            out[key] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The table's scratch directory with every row's set-up made (rows may share one, and
    none depends on another row having run first)."""
    base = tmp_path_factory.mktemp("bad_inputs")
    # the good run: 4 nodes, k = 2, d = 50, checkpoints at rounds 5 and 10 (simulator layout)
    _run_sim(base, [*SMALL, "--rounds", "10", "--checkpoint-every", "5", "--out", "good"])
    for name in sorted({c.setup for c in CASES if c.setup and not c.setup.startswith("hold:")}):
        SETUPS[name](base)
    return base


def _run(case: Case, base: Path, capfd) -> tuple[int, str]:
    args = [a.replace("{base}", str(base)).replace("{good}", str(base / "good"))
            for a in case.args]
    if not case.process:
        return _run_in_process(case, args, base, capfd)
    prog = SIM if case.where == "sim" else ["-m", "mpi_teleport.checkpoint"]
    proc = subprocess.Popen([sys.executable, *prog, *args], cwd=base, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=case.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(f"{case.id}: still running after {case.timeout} s (a hang)")
    return proc.returncode, err


def _run_in_process(case: Case, args: list, base: Path, capfd) -> tuple[int, str]:
    """The program's main() here, as `python -m` would call it; a warning raised on the way
    is written to the returned stderr as PYTHONWARNINGS=default would print it."""
    main = sim.main if case.where == "sim" else checkpoint_main
    capfd.readouterr()
    with contextlib.chdir(base), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            status = main(args)
        except SystemExit as exc:  # (argparse, as in a process)
            status = exc.code
    err = capfd.readouterr().err
    err += "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    return status, err


def _ours(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


@pytest.mark.timeout(300)  # an in-process row that hangs (a process row has its own timeout)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_one_line(case: Case, base: Path, capfd):
    held = None
    if case.setup and case.setup.startswith("hold:"):
        held = lock.acquire(base / case.setup.split(":", 1)[1], "--out")  # "another job"
        (base / case.setup.split(":", 1)[1] / "config.json").write_text("{}\n")
    before = _snapshot(base, case.untouched)
    try:
        status, err = _run(case, base, capfd)
    finally:
        if held is not None:
            held.release()
    assert "Traceback" not in err, f"{case.id}: traceback\n{err[-3000:]}"
    assert "Warning" not in err, f"{case.id}: a warning was printed\n{err[-2000:]}"
    assert status == case.status, f"{case.id}: status {status}, not {case.status}\n{err[-2000:]}"
    lines = _ours(err)
    if case.says is None:
        assert lines == [] or case.status == 0, f"{case.id}: {lines}"
    else:
        assert len(lines) == 1, f"{case.id}: {len(lines)} lines\n{err[-3000:]}"
        assert case.says in lines[0], f"{case.id}: {lines[0]!r} lacks {case.says!r}"
        assert ": error: " in lines[0], lines[0]
    if held is not None:
        before.pop(str(Path(case.setup.split(":", 1)[1]) / lock.RUN_LOCK), None)
    after = _snapshot(base, case.untouched)
    if held is not None:
        after.pop(str(Path(case.setup.split(":", 1)[1]) / lock.RUN_LOCK), None)
    assert after == before, f"{case.id}: files changed: " + ", ".join(
        sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)))


def test_the_table_is_large_enough():
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


# Every other command of the package (issue 31, class 8): bad usage is one line on stderr,
# ``PROG: error: ...``, exit 2 (argparse printed its usage block first; the latency
# command printed its documentation on stdout and nothing on stderr).
OTHER_COMMANDS = [
    (["-m", "mpi_teleport.launch", "--bogus"], "unrecognized arguments: --bogus"),
    (["-m", "mpi_teleport.launch", "-n", "x"], "invalid int value: 'x'"),
    (["-m", "mpi_teleport.launch", "-n", "0"], "-n must be at least 1"),
    (["-m", "mpi_teleport.front.mpi_flavor", "--bogus"], "unrecognized arguments: --bogus"),
    (["-m", "mpi_teleport.latency"], "no command given; the one command is probe"),
    (["-m", "mpi_teleport.latency", "prob"], "unknown command 'prob'"),
    (["-m", "mpi_teleport.latency", "probe"], "required: --latency"),
    (["-m", "mpi_teleport.examples.logistic", "--nodes", "x"], "invalid int value: 'x'"),
    (["-m", "mpi_teleport.examples.custom_model", "--bogus"], "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize("args,says", OTHER_COMMANDS, ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_every_command_says_bad_usage_in_one_line(tmp_path, args, says):
    res = subprocess.run([sys.executable, *args], cwd=tmp_path, env=_env(), capture_output=True,
                         text=True, timeout=120)
    lines = _ours(res.stderr)
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert says in lines[0] and lines[0].startswith(f"python -m {args[1]}"), lines
    assert ": error: " in lines[0] and not res.stdout
