"""The convenience launcher builds the command a user would type, for the MPI its
launcher belongs to (Open MPI: oversubscription and root settings; Hydra: neither)."""
import subprocess

import pytest

from mpi_teleport import launch
from mpi_teleport.front.mpi_flavor import (INTELMPI, MPICH, OPENMPI, UNKNOWN, CRAY, Flavor,
                                           flavor_of_version_text)

VERSION_TEXTS = [
    ("mpirun (Open MPI) 5.0.11\n\nReport bugs to https://www.open-mpi.org/community/help/", OPENMPI),
    ("prterun (Open MPI) 5.0.3", OPENMPI),
    ("mpirun (Open MPI) 4.1.5", OPENMPI),
    ("HYDRA build details:\n    Version: 5.0.2\n    Process Manager: pmi", MPICH),
    ("MPICH Version:      4.3.2\nMPICH Release date: ...", MPICH),
    ("Intel(R) MPI Library for Linux* OS, Version 2021.13 Build 20240701\nCopyright ...", INTELMPI),
    ("MPI VERSION    : CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)", CRAY),
    ("mpiexec: unrecognized option '--version'", UNKNOWN),
]


@pytest.mark.parametrize("text,name", VERSION_TEXTS)
def test_version_text_names_the_implementation(text, name):
    assert flavor_of_version_text(text).name == name


def test_oversubscription_flags_open_mpi_and_mpich(monkeypatch):
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 2)
    argv = ["python", "-m", "mpi_teleport.run"]
    cmd = launch.mpirun_command(25, argv, mpirun="mpirun", flavor=Flavor(OPENMPI))
    assert cmd[:3] == ["mpirun", "-n", "25"] and cmd[-3:] == argv
    assert "--oversubscribe" in cmd and "core:overload-allowed" in cmd
    assert "--oversubscribe" not in launch.mpirun_command(2, argv, mpirun="mpirun", flavor=Flavor(OPENMPI))
    # four or more ranks a core: the waiting ranks sleep longer between looks; fewer: not
    assert "threads_pthreads_nanosleep_time" in cmd
    assert "threads_pthreads_nanosleep_time" not in launch.mpirun_command(
        7, argv, mpirun="mpirun", flavor=Flavor(OPENMPI))
    assert "threads_pthreads_nanosleep_time" in launch.mpirun_command(
        8, argv, mpirun="mpirun", flavor=Flavor(OPENMPI))
    for other in (INTELMPI, CRAY, UNKNOWN):  # Hydra rejects every one of those flags
        assert launch.mpirun_command(25, argv, mpirun="mpiexec", flavor=Flavor(other), env={}) == \
            ["mpiexec", "-n", "25", *argv]
    # MPICH's waiting ranks yield as a nanosleep when oversubscribed (a Hydra -genv), only then
    assert launch.mpirun_command(25, argv, mpirun="mpiexec", flavor=Flavor(MPICH), env={}) == \
        ["mpiexec", "-n", "25", "-genv", "MPIR_CVAR_ENABLE_HEAVY_YIELD", "1", *argv]
    assert launch.mpirun_command(2, argv, mpirun="mpiexec", flavor=Flavor(MPICH), env={}) == \
        ["mpiexec", "-n", "2", *argv]


def test_open_mpi_on_one_machine_skips_its_libfabric_btl():
    """Its probe costs every rank about a second at start-up; one machine never uses it. Not
    with hosts, inside a batch allocation (it may span machines), or where the environment
    chooses the BTLs itself; other implementations get nothing."""
    argv = ["py"]
    assert launch.mpirun_command(2, argv, "mpirun", Flavor(OPENMPI), env={}) == \
        ["mpirun", "-n", "2", "--mca", "btl", "^ofi", "py"]
    for env in ({"SLURM_JOB_ID": "7"}, {"PBS_JOBID": "7"}, {"OMPI_MCA_btl": "self,tcp"}):
        assert launch.mpirun_command(2, argv, "mpirun", Flavor(OPENMPI), env=env) == ["mpirun", "-n", "2", "py"]
    assert "^ofi" not in launch.mpirun_command(2, argv, "mpirun", Flavor(OPENMPI), hosts="a:1,b:1", env={})
    assert launch.mpirun_command(2, argv, "mpiexec", Flavor(MPICH), env={}) == ["mpiexec", "-n", "2", "py"]


def test_root_env_only_where_the_implementation_asks(monkeypatch):
    monkeypatch.setattr(launch.os, "geteuid", lambda: 0)
    env = launch.mpi_env({}, Flavor(OPENMPI))
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert launch.mpi_env({}, Flavor(MPICH)) == {}
    monkeypatch.setattr(launch.os, "geteuid", lambda: 1000)
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in launch.mpi_env({}, Flavor(OPENMPI))


def test_srun_plugin_per_library():
    assert [Flavor(f).srun_mpi for f in (OPENMPI, MPICH, INTELMPI, CRAY)] == \
        ["pmix", "pmi2", "pmi2", "cray_shasta"]


def test_bad_rank_count(capsys):
    assert launch.main(["-n", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


def test_missing_launcher_is_one_line_exit_2(capsys):
    assert launch.main(["-n", "2", "--mpirun", "/nonexistent/mpirun"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such program" in err[0]


def test_rsh_without_hosts_is_one_line_exit_2(capsys):
    assert launch.main(["-n", "2", "--rsh", "ssh"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--rsh needs --hosts" in err[0]


def test_host_placement_per_implementation(monkeypatch):
    """Open MPI: --host, the agent as plm_rsh_agent, -x for what remote ranks need (it hands
    on nothing else); Hydra: -hosts, the agent as ssh launcher, the whole environment."""
    monkeypatch.setattr(launch.os, "cpu_count", lambda: 2)
    env = {"PYTHONPATH": "/repo", "OMP_NUM_THREADS": "1"}
    cmd = launch.mpirun_command(4, ["py"], "mpirun", Flavor(OPENMPI), hosts="a:2,b:2", rsh_agent="agent", env=env)
    assert cmd == ["mpirun", "-n", "4", "--host", "a:2,b:2", "--mca", "plm_rsh_agent", "agent",
                   "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "py"]
    cmd = launch.mpirun_command(4, ["py"], "mpiexec", Flavor(MPICH), hosts="a:2,b:2", rsh_agent="agent", env=env)
    assert cmd == ["mpiexec", "-n", "4", "-hosts", "a:2,b:2", "-launcher", "ssh", "-launcher-exec", "agent", "py"]
    # 3 ranks per host on 2 cores: Open MPI must oversubscribe each host
    assert "--oversubscribe" in launch.mpirun_command(6, ["py"], "mpirun", Flavor(OPENMPI), hosts="a:3,b:3", env={})
    assert "--oversubscribe" not in launch.mpirun_command(4, ["py"], "mpirun", Flavor(OPENMPI), hosts="a:2,b:2", env={})


@pytest.mark.mpi_tier
@pytest.mark.parametrize("ranks", [8])  # (the flags for 25 ranks: the tests above; 25 ranks: test_mpi.py)
def test_launch_runs_the_demo_under_each_implementation(mpi_impl, ranks, tmp_path):
    """`python -m mpi_teleport.launch -n N` with the Python of each wheel: the launcher
    beside it, the command for its implementation, the comparison table."""
    proc = subprocess.run([mpi_impl.python, "-m", "mpi_teleport.launch", "-n", str(ranks), "--",
                           "--rounds", "30", "--progress", "off"], cwd=tmp_path,
                          env=mpi_impl.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = [line for line in proc.stderr.splitlines() if line.startswith("+ ")]
    assert len(shown) == 1 and shown[0].endswith(f"({mpi_impl.name})"), proc.stderr[-2000:]
    assert f"{mpi_impl.mpirun} -n {ranks} " in shown[0]
    assert ("--oversubscribe" in shown[0]) == (mpi_impl.name == OPENMPI and ranks > launch.os.cpu_count())
    assert proc.stdout.startswith(f"MPI, n={ranks} ranks") and "Teleportation" in proc.stdout


@pytest.mark.mpi_tier  # (the launcher's flags are per implementation)
def test_launch_runs_a_user_script_with_4_ranks(mpi_impl):
    """`python -m mpi_teleport.launch -n 4 script.py [its args]` on this 2-core machine: the
    launcher's flags (oversubscription), the script's own arguments, the simulator's numbers."""
    import json

    from helpers import ROOT

    proc = subprocess.run([mpi_impl.python, "-m", "mpi_teleport.launch", "-n", "4",
                           "tests/scripts/user_script.py", "--rounds", "20"], cwd=ROOT,
                          env=mpi_impl.env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = [line for line in proc.stderr.splitlines() if line.startswith("+ ")]
    assert len(shown) == 1 and "user_script.py --rounds 20" in shown[0]
    assert ("--oversubscribe" in shown[0]) == (mpi_impl.name == OPENMPI and 4 > launch.os.cpu_count())
    facts = json.loads(proc.stdout)
    assert facts == {"ranks": 4, "rounds": 20, "argv": ["--rounds", "20"], "records": 5,
                     "same_as_simulator": True}


def test_launch_splits_its_own_options_from_the_users_program(tmp_path, capsys):
    split = launch.split_program
    assert split(["-n", "4", "train.py", "-n", "9", "--lr", "1"]) == \
        (["-n", "4"], ["train.py", "-n", "9", "--lr", "1"])
    assert split(["-n", "2", "-m", "pkg.mod", "--mpi"]) == (["-n", "2"], ["-m", "pkg.mod", "--mpi"])
    assert split(["--mpirun", "x.py", "-n", "2", "t.py"]) == (["--mpirun", "x.py", "-n", "2"], ["t.py"])
    assert split(["-n", "2", "--", "--rounds", "5"]) == (["-n", "2", "--", "--rounds", "5"], None)
    assert launch.main(["-n", "2", str(tmp_path / "missing.py")]) == 2
    assert "missing.py: no such file" in capsys.readouterr().err


@pytest.mark.mpi_tier
def test_each_environment_s_mpi4py_loads_its_own_library(mpi_impl):
    """The MPICH venv sees this venv's packages too (.pth): its mpi4py must still be its own."""
    from launch_helpers import library_version

    expected = {"openmpi": "Open MPI", "mpich": "MPICH"}[mpi_impl.name]
    assert library_version(mpi_impl.python).startswith(expected)
    proc = subprocess.run([mpi_impl.python, "-m", "mpi_teleport.front.mpi_flavor", "--srun-mpi"],
                          env=mpi_impl.env(), capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == {"openmpi": "pmix", "mpich": "pmi2"}[mpi_impl.name], proc.stderr


EPOLL = (b"[warn] Epoll MOD(4) on fd 20 failed. Old events were 6; read change was 2 (del); write "
         b"change was 0 (none); close change was 0 (none): Bad file descriptor\n")
PMIX = b"[vm:31747] PMIX ERROR: PMIX_ERR_UNREACH in file /openmpi-5.0.11/3rd-party/openpmix/src/server/pmix_server.c at line 3146\n"


def test_open_mpis_teardown_lines_are_left_out_and_nothing_else(tmp_path):
    """Issue 50, class 11: Open MPI's libevent and PMIx lines when ranks exit together are
    dropped whole, however the pipe cuts them; every other byte passes as it comes (a
    progress bar's \\r updates, a line that begins with '[' like the ranks' own)."""
    import io
    import os
    import threading

    from mpi_teleport.front.mpi_flavor import OPENMPI_EXIT_NOISE

    refusal = b"mpirun -n N python -m mpi_teleport.run: error: the problem's dim differs between ranks\n"
    pieces = [refusal[:10], refusal[10:] + EPOLL[:9], EPOLL[9:30], EPOLL[30:] + b"\rTeleportation [##  ] 5%",
              b"\rTeleportation [####] 9%\n[rank 1] Traceback (most recent call last):\n", PMIX[:5],
              PMIX[5:] + b"[warn] something else\n[unfinished"]
    read, write = os.pipe()
    out = io.BytesIO()
    with os.fdopen(read, "rb") as src:
        copier = threading.Thread(target=launch.copy_without, args=(src, out, OPENMPI_EXIT_NOISE))
        copier.start()
        for piece in pieces:
            os.write(write, piece)
        os.close(write)
        copier.join(timeout=30)
    assert out.getvalue() == (refusal + b"\rTeleportation [##  ] 5%\rTeleportation [####] 9%\n"
                              b"[rank 1] Traceback (most recent call last):\n[warn] something else\n[unfinished")
    assert Flavor(MPICH).exit_noise == () and Flavor(OPENMPI).exit_noise == OPENMPI_EXIT_NOISE


FAKE_OPENMPI = """#!/bin/sh
if [ "$1" = --version ]; then echo "mpirun (Open MPI) 5.0.11"; exit 0; fi
printf 'prog: error: the problem'"'"'s dim differs between ranks\\n' >&2
printf '%s' "$EPOLL" >&2
printf '%s' "$PMIX" >&2
exit 2
"""


def test_the_launcher_keeps_open_mpis_teardown_lines_out_of_a_refusal(tmp_path):
    import os
    import sys

    fake = tmp_path / "mpirun"
    fake.write_text(FAKE_OPENMPI)
    fake.chmod(0o755)
    env = {**os.environ, "EPOLL": EPOLL.decode(), "PMIX": PMIX.decode()}
    proc = subprocess.run([sys.executable, "-m", "mpi_teleport.launch", "-n", "4", "--mpirun", str(fake),
                           "--", "--rounds", "5"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("+ ") and lines[0].endswith("(openmpi)")
    assert lines[1:] == ["prog: error: the problem's dim differs between ranks"]


FAKE_OPENMPI_OK = """#!/bin/sh
if [ "$1" = --version ]; then echo "mpirun (Open MPI) 5.0.11"; exit 0; fi
exit 0
"""


def shown_command(tmp_path, *args) -> tuple[int, str, str]:
    """The launcher's `+ ...` line for these arguments, run through a fake Open MPI."""
    import os
    import sys

    fake = tmp_path / "mpirun"
    fake.write_text(FAKE_OPENMPI_OK)
    fake.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "mpi_teleport.launch", "-n", "4", "--mpirun", str(fake), *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(launch.Path(launch.__file__).parents[1])})
    shown = [line for line in proc.stderr.splitlines() if line.startswith("+ ")]
    return proc.returncode, shown[0] if shown else "", proc.stderr


def test_the_launcher_reads_elastic_from_the_runs_config_file(tmp_path):
    """Issue 50, class 7: `launch -n 4 -- --config e.toml` with elastic = true in the file
    adds ULFM as --elastic does (read by the run's own parser and TOML reader; a flag
    overrides the file); a file the run will refuse is left to the run's own line."""
    (tmp_path / "e.toml").write_text("elastic = true\nrounds = 5\n")
    (tmp_path / "plain.toml").write_text("rounds = 5\n")
    assert launch.run_is_elastic(["--config", str(tmp_path / "e.toml")])
    assert not launch.run_is_elastic(["--config", str(tmp_path / "e.toml"), "--no-elastic"])
    assert launch.run_is_elastic(["--config", str(tmp_path / "plain.toml"), "--elastic"])
    assert not launch.run_is_elastic(["--config", str(tmp_path / "plain.toml")])
    assert not launch.run_is_elastic(["--config", str(tmp_path / "missing.toml")])
    assert not launch.run_is_elastic(["--help"])
    status, shown, err = shown_command(tmp_path, "--", "--config", "e.toml")
    assert status == 0 and "--with-ft ulfm" in shown, err
    status, shown, err = shown_command(tmp_path, "--", "--config", "plain.toml")
    assert status == 0 and "--with-ft" not in shown, err
    assert launch.mpirun_command(2, ["py"], "mpiexec", Flavor(MPICH), env={}, elastic=True) == \
        ["mpiexec", "-n", "2", "py"]  # (Hydra has no ULFM: the run refuses --elastic itself)


def test_a_missing_module_is_one_line_exit_2_as_a_missing_script_is(tmp_path):
    status, shown, err = shown_command(tmp_path, "-m", "no_such_module", "--lr", "1")
    assert status == 2 and err.strip().splitlines() == [
        "python -m mpi_teleport.launch: error: -m no_such_module: no such module (on this Python's "
        "path or in the current folder)"]
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "train.py").write_text("")
    assert [launch.module_exists(m) for m in ("mine", "mine.train", "mine.nope", "json.decoder", "a-b")] == \
        [False, False, False, True, False]  # (tmp_path is not this process's folder)
    status, shown, err = shown_command(tmp_path, "-m", "mine.train", "--lr", "1")
    assert status == 0 and shown.endswith("-m mpi_teleport.script_runner -m mine.train --lr 1    "
                                          "(openmpi)"), err
    status, shown, err = shown_command(tmp_path, "-m", "mine.nope")
    assert status == 2 and "-m mine.nope: no such module" in err


@pytest.mark.mpi_tier  # (MPI_Abort's reach: the implementation's own path)
def test_a_scripts_exception_on_one_rank_before_its_first_call_ends_the_job(mpi_impl):
    """Issue 50, class 8: rank 1 raises before its first call while the others wait in the
    start-up collective. The launcher starts scripts under mpi4py's runner: the job ends
    (a hang fails here), non-zero, with the traceback once."""
    from helpers import ROOT

    proc = subprocess.run([mpi_impl.python, "-m", "mpi_teleport.launch", "-n", "3",
                           "tests/scripts/raise_before_first_call.py"], cwd=ROOT,
                          env=mpi_impl.env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode != 0
    assert proc.stderr.count("Traceback (most recent call last)") == 1, proc.stderr[-3000:]
    assert "RuntimeError: rank 1 fails before its first call" in proc.stderr


def test_intel_mpis_mpirun_script_gives_way_to_its_hydra_mpiexec(tmp_path):
    """Intel MPI's wheel puts beside python an `mpirun` shell script that runs mpiexec.hydra
    from PATH (outside an activated venv: "not found", and its error text was taken for
    MPICH) and Hydra's own `mpiexec`: the launcher takes the latter; MPICH's and Open
    MPI's mpirun stay the choice."""
    from mpi_teleport.front.mpi_flavor import find_mpirun

    for name, text in (("python", ""), ("mpirun", "#!/bin/sh\nmpiexec.hydra \"$@\"\n"), ("mpiexec", "")):
        (tmp_path / name).write_text(text)
    assert find_mpirun(str(tmp_path / "python")) == str(tmp_path / "mpiexec")
    (tmp_path / "mpirun").write_text("\x7fELF...")  # (a binary mpirun, as MPICH's)
    other = tmp_path / "other"
    other.mkdir()
    for name in ("python", "mpirun", "mpiexec"):
        (other / name).write_bytes((tmp_path / name).read_bytes())
    assert find_mpirun(str(other / "python")) == str(other / "mpirun")


# ------------------------------------------------------------------ signals to the launcher
# What `timeout`, `kill`, a closed terminal and Ctrl-C send the launcher (SIGTERM, SIGHUP,
# SIGINT), mid-run, before round 0 and twice, under both MPIs: the status, one line, the
# final checkpoint, and the resumed run equal to the simulator's uninterrupted one. The
# logging rounds are far apart (never, here): the stop comes from the ranks' watch.
WATCHED = ["--problem", "factories:announcing", "--algorithm", "teleportation", "--k", "2",
           "--momentum", "0.5", "--seed", "5", "--log-every", "100000000", "--progress", "off"]


def _impl(name: str):
    from launch_helpers import implementation

    impl = implementation(name)
    if isinstance(impl, str):
        pytest.skip(impl)
    return impl


def _launch(impl, argv: list[str], tmp_path, **env):
    """`launch -n 4 ARGV` in the background (its own session), stderr to a file; the tests'
    scripts on the path. Its processes carry a tag (``proc.tag``) to kill them by."""
    import os

    from helpers import ROOT
    from launch_helpers import new_tag

    tag = new_tag()
    full = impl.env(dict(os.environ, PYTHONPATH=str(ROOT / "tests" / "scripts"), **env), tag)
    with open(tmp_path / "launch.err", "wb") as err:
        proc = subprocess.Popen([impl.python, "-m", "mpi_teleport.launch", "-n", "4", *argv],
                                cwd=ROOT, env=full, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    proc.tag = tag
    return proc


def _ended(proc, tmp_path, timeout: float = 120) -> tuple[int, list[str], bytes]:
    """(status, the lines of stderr but the launcher's `+ command`, the raw bytes)."""
    from launch_helpers import kill_tagged

    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running {timeout}s after the signal")
    finally:
        kill_tagged(proc.tag)
    raw = (tmp_path / "launch.err").read_bytes()
    return proc.returncode, [line for line in raw.decode(errors="replace").splitlines()
                             if not line.startswith("+ ")], raw


def _wait_for(path, proc, timeout: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{path} did not appear (status {proc.poll()})")
        time.sleep(0.05)


@pytest.mark.parametrize("name, mpi", [("SIGTERM", "openmpi"), ("SIGHUP", "mpich"),
                                       ("SIGINT", "intelmpi")])
def test_a_signal_to_launch_stops_every_rank_at_one_round_and_resuming_ends_as_uninterrupted(
        tmp_path, monkeypatch, name, mpi):
    import signal

    from helpers import ROOT
    from mpi_teleport import checkpoint
    from mpi_teleport.disk.output import read_jsonl
    from mpi_teleport.sim import main as sim_main

    impl, out = _impl(mpi), tmp_path / "run"
    proc = _launch(impl, ["--", *WATCHED, "--rounds", "100000000", "--checkpoint-every",
                          "100000000", "--out", str(out)], tmp_path,
                   ROUNDS_STARTED=str(tmp_path / "started"))
    try:
        _wait_for(tmp_path / "started", proc)
        proc.send_signal(getattr(signal, name))
    finally:
        status, lines, raw = _ended(proc, tmp_path)
    assert status == 75 and b"\0" not in raw, raw[-3000:]
    assert len(lines) == 1 and f"mpi_teleport.run: stopped by {name} at round" in lines[0], lines
    path, manifest = checkpoint.locate(out)
    assert manifest["reason"] == "signal" and len(list(path.glob("token-*.npz"))) == 2
    r = manifest["round"]
    resumed = subprocess.run([impl.python, "-m", "mpi_teleport.launch", "-n", "4", "--",
                              "--resume", str(out), "--rounds", str(r + 20)], cwd=ROOT,
                             env=impl.env(dict(__import__("os").environ,
                                               PYTHONPATH=str(ROOT / "tests" / "scripts"))),
                             capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "scripts"))
    assert sim_main(["--nodes", "4", *WATCHED, "--rounds", str(r + 20), "--out",
                     str(tmp_path / "sim")]) == 0
    got, want = (read_jsonl(d / "metrics.jsonl") for d in (out, tmp_path / "sim"))
    assert [(x["round"], x["error"], x["consensus"]) for x in got] == \
        [(x["round"], x["error"], x["consensus"]) for x in want]


@pytest.mark.parametrize("name, what, mpi", [
    ("SIGTERM", "command line, ranks building the problem", "openmpi"),
    ("SIGHUP", "script, ranks importing", "openmpi"),
    ("SIGINT", "script, ranks importing", "mpich"),
])
def test_a_signal_to_launch_before_round_0_ends_at_once_in_one_line(tmp_path, name, what, mpi):
    """Nothing ran, nothing to save: status 128 + the signal and one line, whether the
    ranks had their handlers in place (the run stops its set-up and says so) or not yet
    (the launcher ends the job and says so)."""
    import signal

    from helpers import ROOT

    impl, out = _impl(mpi), tmp_path / "run"
    if "script" in what:  # (it waits before its call, as one importing torch)
        argv, ready = [str(ROOT / "tests/scripts/api_signal_script.py"), str(out), "outside",
                       "mpi", "late"], tmp_path / "run.waiting"
    else:
        argv, ready = ["--", "--problem", "factories:very_slow", "--rounds", "100", "--out",
                       str(out)], tmp_path / "started"
    proc = _launch(impl, argv, tmp_path, FACTORY_STARTED=str(tmp_path / "started"))
    try:
        _wait_for(ready, proc)
        proc.send_signal(getattr(signal, name))
    finally:
        status, lines, raw = _ended(proc, tmp_path, timeout=60)
    assert status == 128 + getattr(signal, name) and b"\0" not in raw, raw[-3000:]
    assert len(lines) == 1 and f"stopped by {name} before" in lines[0], lines
    assert not list(out.glob("checkpoints/round-*"))


def test_a_second_signal_to_launch_ends_the_job_at_once_in_one_line(tmp_path):
    """(Once the ranks have agreed on their stop round, a second signal lets the final
    checkpoint finish, as it does sent to the ranks themselves.)"""
    import signal

    impl = _impl("openmpi")
    proc = _launch(impl, ["--", *WATCHED, "--rounds", "100000000", "--out", str(tmp_path / "run")],
                   tmp_path, ROUNDS_STARTED=str(tmp_path / "started"))
    try:
        _wait_for(tmp_path / "started", proc)
        proc.send_signal(signal.SIGINT)  # (two different signals: two handlers, in the
        proc.send_signal(signal.SIGTERM)  # signals' order, before the ranks could agree)
    finally:
        status, lines, raw = _ended(proc, tmp_path, timeout=60)
    assert status == 128 + signal.SIGTERM and b"\0" not in raw, raw[-3000:]
    assert lines == ["python -m mpi_teleport.launch: stopped at once by a second signal "
                     "(SIGTERM), without a final checkpoint"], lines
