"""The jobs/*.sbatch scripts under a real (local, single-node) SLURM.

The module starts SLURM with ``jobs/local-cluster.sh start`` (which waits for another
apt/dpkg to finish) and skips, with the reason, where it cannot (not root, no apt, no
Debian); whether SLURM is up is decided once per run (slurm_env). Every script in jobs/ is submitted with
``sbatch --wait`` in quick mode (all at once, so they overlap) and its outputs are checked;
one job is killed by its time limit, requeues itself and resumes from its checkpoint, and
must end with the numbers of an uninterrupted run.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launch_helpers import implementation
from mpi_teleport.session.settings import PROBLEMS
from mpi_teleport.disk.output import read_jsonl
from mpi_teleport.sim import main as sim_main
from helpers import ROOT

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(1200)]

SCRIPTS = sorted(p.name for p in (ROOT / "jobs").glob("*.sbatch"))

# The time-limit job: 4 ranks, k = 2; the first attempt sleeps 50 ms per local step
# (tests/scripts/slow_run.py), so it needs > 100 s and meets its 1-minute limit (SLURM
# enforces it within 30 s); later attempts do not sleep.
LIMIT_ROUNDS = 2000
LIMIT_JOBS = ["time-limit", "time-limit[mpich]"]
LIMIT_ARGS = (f"--algorithm teleportation --k 2 --rounds {LIMIT_ROUNDS} --log-every 10 "
              "--momentum 0.5 --seed 11")


# Whether this test session started the local SLURM (munged, slurmctld, slurmd): then the
# session stops it at its end (session_finish, called by tests/conftest.py), so that the
# README's test command leaves no daemons behind; SLURM found running (.ci/run starts it
# first, or another session uses it) is left running.
STARTED_BY_THIS_SESSION: list = []


def _slurm_up() -> bool:
    try:
        return subprocess.run(["bash", "jobs/local-cluster.sh", "status"], cwd=ROOT,
                              capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _start_slurm() -> dict:
    if os.name != "posix":
        pytest.skip("SLURM tests need Linux")
    was_up = _slurm_up()
    if not was_up:  # (noted first: a start that fails half-way leaves daemons too)
        STARTED_BY_THIS_SESSION.append(True)
    try:  # (it waits up to 600 s for another apt/dpkg, then installs and starts)
        proc = subprocess.run(["bash", "jobs/local-cluster.sh", "start"], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        pytest.skip("local SLURM did not start within 900 s (jobs/local-cluster.sh start)")
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {proc.returncode}"
        pytest.skip(f"local SLURM could not start (jobs/local-cluster.sh start): {reason}")
    match = re.search(r"SLURM_CONF=(\S+)", proc.stdout)
    env = dict(os.environ)
    if match:
        env["SLURM_CONF"] = match.group(1)
    env["PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("SLURM_JOB_ID", None)
    return {"env": env}


def slurm_env(config) -> dict:
    """The environment of this run's SLURM jobs, where SLURM is up: whether it is, is decided
    once per run, by the first process to ask (the pytest-xdist controller at collection,
    or a worker's first SLURM test), and written to the run's folder; every later test of
    the run, in whichever process, keeps that decision. So a run never both skips some
    SLURM tests (a start that failed) and runs others (a later start that worked): SLURM
    found up and lost later in the run fails, saying so. Skips, with the first reason,
    where it was not up."""
    import fcntl

    decision = early_dir(config) / "slurm-decision.json"
    decision.parent.mkdir(parents=True, exist_ok=True)
    with open(decision.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # (one decides; the others wait for its start)
        if decision.exists():
            known = json.loads(decision.read_text())
        else:
            try:
                info = _start_slurm()
            except pytest.skip.Exception as exc:
                decision.write_text(json.dumps({"up": False, "why": str(exc.msg)}))
                raise
            decision.write_text(json.dumps({"up": True, "pid": os.getpid()}))
            return info["env"]
    if not known["up"]:
        pytest.skip(known["why"])
    try:
        return _start_slurm()["env"]  # (up: returns at once with its SLURM_CONF)
    except pytest.skip.Exception as exc:
        pytest.fail(f"the local SLURM was up earlier in this run and is not now: {exc.msg}")


def python_for(name: str) -> str | None:
    """The job's PYTHON: MPICH's for jobs named [mpich...], else this one; None if MPICH is
    not available here."""
    if "mpich" not in name:
        return sys.executable
    impl = implementation("mpich")
    return None if isinstance(impl, str) else impl.python


class Job:
    """One ``sbatch --wait`` in the background; :meth:`wait` collects it. Its state is on
    disk (the exit status in ``sbatch.status``), so a job submitted by one process (the
    pytest-xdist controller, at collection) is collected by another (the worker running its
    test): :meth:`adopt`."""

    CANCEL_WAIT_S = 120  # (cancel: how long its sbatch --wait may take to notice)

    def __init__(self, name: str, script: str, sbatch_args: list[str], env: dict, tmp: Path):
        self.name, self.tmp = name, tmp
        tmp.mkdir(parents=True, exist_ok=True)
        self.env = {**env, "RUNS": str(tmp / "runs"), "OUT_DIR": str(tmp / "out")}
        self.status = None
        with open(tmp / "sbatch.stdout", "w") as out, open(tmp / "sbatch.stderr", "w") as err:
            self.proc = subprocess.Popen(
                ["sh", "-c", 'sbatch "$@"; echo $? > "$0.part" && mv "$0.part" "$0"',
                 str(tmp / "sbatch.status"), "--wait", "--parsable",
                 f"--output={tmp}/slurm-%j.out", *sbatch_args, f"jobs/{script}"],
                cwd=ROOT, env=self.env, stdout=out, stderr=err, text=True)

    @classmethod
    def adopt(cls, name: str, tmp: Path, env: dict) -> "Job":
        """The job another process submitted into ``tmp``."""
        job = cls.__new__(cls)
        job.name, job.tmp, job.status, job.proc = name, tmp, None, None
        job.env = {**env, "RUNS": str(tmp / "runs"), "OUT_DIR": str(tmp / "out")}
        return job

    @property
    def job_id(self) -> str | None:
        text = (self.tmp / "sbatch.stdout").read_text().split()
        return text[0].split(";")[0] if text else None

    def _status(self) -> int | None:
        path = self.tmp / "sbatch.status"
        return int(path.read_text().strip() or -1) if path.exists() else None

    def wait(self, timeout: float) -> int:
        """The job's exit status once SLURM says it has ended. ``sbatch --wait`` alone is not
        enough for a job that requeues itself: once in about a dozen suites here it returned
        0 when the first attempt had ended and the requeued one had not started (its poll
        landed between the two), and the test read the logs of half a job."""
        deadline = time.monotonic() + timeout
        while self.status is None or self._slurm_state() in self.NOT_ENDED:
            if self.status is None:
                self.status = self._status()
            if time.monotonic() > deadline:
                self.cancel()
                pytest.fail(f"job {self.name} ({self.job_id}) did not end within {timeout}s\n"
                            f"{self.logs()[-3000:]}")
            time.sleep(0.2 if self.status is None else 1.0)
        if self.status == 0 and self._slurm_state() not in (None, "COMPLETED"):
            self.status = 1  # (the requeued attempt failed, or was cancelled, after sbatch's 0)
        if self.proc is not None:
            self.proc.wait(timeout=60)
        return self.status

    # SLURM's states of a job that has not ended (a requeued job passes through these)
    NOT_ENDED = ("PENDING", "RUNNING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING",
                 "COMPLETING", "RESIZING", "SUSPENDED", "STAGE_OUT", "SIGNALING", "STOPPED")

    def _slurm_state(self) -> str | None:
        """SLURM's JobState of this job (None where it has forgotten the job or is unreachable)."""
        if not self.job_id:
            return None
        try:
            res = subprocess.run(["scontrol", "show", "job", "-o", self.job_id], env=self.env,
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        found = re.search(r"\bJobState=(\S+)", res.stdout)
        return found.group(1) if found else None

    def cancel(self) -> None:
        """scancel the job if it has not ended, and end its `sbatch --wait` (which notices
        a cancelled job only at its next poll of slurmctld, up to about a minute later on a
        busy machine: a cleanup that waited for it with a hard limit once errored a test)."""
        if self._status() is None and self.job_id:
            subprocess.run(["scancel", self.job_id], env=self.env, capture_output=True, timeout=30)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=self.CANCEL_WAIT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def run_dirs(self) -> list[Path]:
        runs = self.tmp / "runs"
        return sorted(p for p in runs.iterdir() if p.is_dir()) if runs.exists() else []

    def logs(self) -> str:
        text = [(self.tmp / "sbatch.stderr").read_text()]
        text += [p.read_text(errors="replace") for p in sorted(self.tmp.glob("slurm-*.out"))]
        text += [(d / "job.log").read_text(errors="replace") for d in self.run_dirs()
                 if (d / "job.log").exists()]
        return "\n".join(text)


QUICK = {  # name -> (script, sbatch arguments, extra environment); [mpich]: PYTHON of MPICH
    "teleport.sbatch": ("teleport.sbatch", ["-n", "4"], {}),
    "teleport.sbatch[mpirun]": ("teleport.sbatch", ["-n", "4"], {"MPI_LAUNCHER": "mpirun"}),
    "teleport.sbatch[mpich]": ("teleport.sbatch", ["-n", "4"], {}),
    "teleport.sbatch[mpich,mpirun]": ("teleport.sbatch", ["-n", "4"], {"MPI_LAUNCHER": "mpirun"}),
    "search.sbatch": ("search.sbatch", ["-n", "7"], {}),
    "networks.sbatch": ("networks.sbatch", ["-n", "2"], {}),  # (2: its ranks import torch)
    "latency_sweep.sbatch": ("latency_sweep.sbatch", ["-n", "4"], {}),
}
for _script in SCRIPTS:  # any further script: quick mode on 4 tasks
    if _script not in QUICK and _script != "figure4.sbatch":  # (tests/test_jobs_figure4.py runs it)
        QUICK[_script] = (_script, ["-n", "4"], {})


def limit_job(name: str, info: dict, base: Path) -> Job:
    return Job(name, "teleport.sbatch",
               ["-n", "4", "--time=1", "--signal=B:USR1@0", "--job-name=limit"],
               {**info["env"], "PYTHON": python_for(name), "RUN": "tests/scripts/slow_run.py",
                "SLOW_STEP_S": "0.05", "CHECKPOINT_EVERY": "200", "ARGS": LIMIT_ARGS},
               base / re.sub(r"\W", "_", name))


def early_dir(config) -> Path:
    """Where start_early submits its jobs: the session's base temporary folder, which the
    pytest-xdist workers' own folders lie in."""
    base = config._tmp_path_factory.getbasetemp()
    return (base.parent if hasattr(config, "workerinput") else base) / "slurm-early"


def take_early(config, name: str, env: dict) -> "Job | None":
    """The job start_early submitted as ``name``, if it did."""
    tmp = early_dir(config) / re.sub(r"\W", "_", name)
    return Job.adopt(name, tmp, env) if (tmp / "sbatch.stdout").exists() else None


def start_early(config, names: list[str]) -> None:
    """Submit the selected jobs (``names``: the selected tests of this module) as soon as the
    tests are collected (tests/conftest.py calls this: in the pytest-xdist controller, else
    in pytest itself), where SLURM is already up (.ci/run starts it first): the time-limit
    jobs mostly wait for their one-minute limit and the quick-mode jobs use the core that
    the other tests leave idle, so both overlap them. Elsewhere the module fixture submits
    them, as before."""
    if config.option.collectonly or not any(n.startswith(("test_time_limit", "test_job_script"))
                                            for n in names):
        return
    try:
        if not _slurm_up():
            return
        env = slurm_env(config)  # (already up: decided here, returns at once)
    except (OSError, subprocess.SubprocessError, pytest.skip.Exception, pytest.fail.Exception):
        return
    info = {"env": env}
    base = early_dir(config)
    selected = {n.split("[")[0] for n in names}
    for name in LIMIT_JOBS:
        if python_for(name) and "test_time_limit_requeue_resumes_and_equals_an_uninterrupted_run" in selected:
            limit_job(name, info, base)
    if "test_job_script_runs_to_completion_in_quick_mode" not in selected:
        return
    for name in QUICK:
        quick_job(name, info, base)


def session_finish(session) -> None:
    """At the end of the test session (tests/conftest.py): stop the local SLURM if this
    session started it. What the suite starts, the suite stops."""
    if not STARTED_BY_THIS_SESSION:
        return
    STARTED_BY_THIS_SESSION.clear()
    try:
        subprocess.run(["bash", "jobs/local-cluster.sh", "stop"], cwd=ROOT, capture_output=True,
                       timeout=120)
    except (OSError, subprocess.SubprocessError):
        pass


def quick_job(name: str, info: dict, base: Path) -> "Job | None":
    """Submit job ``name`` of QUICK (None where its script or Python is missing)."""
    script, args, extra = QUICK[name]
    if not (ROOT / "jobs" / script).exists() or not python_for(name):
        return None
    return Job(name, script, args, {**info["env"], "PYTHON": python_for(name), "QUICK": "1", **extra},
               base / re.sub(r"\W", "_", name))


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    info = {"env": slurm_env(request.config)}
    base = tmp_path_factory.mktemp("slurm")
    jobs = {}
    # the long ones first, so that the quick ones run meanwhile
    for name in LIMIT_JOBS:
        job = take_early(request.config, name, info["env"])
        if job is None and python_for(name):
            job = limit_job(name, info, base)
        if job is not None:
            jobs[name] = job
    for name in QUICK:
        job = take_early(request.config, name, info["env"]) or quick_job(name, info, base)
        if job is not None:
            jobs[name] = job
    yield jobs
    for job in jobs.values():
        job.cancel()
    # (SLURM stays up for the session's other SLURM tests; session_finish stops it at the
    # session's end if this session started it; .ci/run stops what it started itself)


def numbers(path):
    return [(r["round"], r.get("error", r.get("loss")), r["consensus"]) for r in read_jsonl(path)]


def the_run_dir(job: Job) -> Path:
    dirs = job.run_dirs()
    assert len(dirs) == 1, f"{job.name}: expected one job directory, found {dirs}\n{job.logs()[-2000:]}"
    return dirs[0]


@pytest.mark.parametrize("name", list(QUICK))
def test_job_script_runs_to_completion_in_quick_mode(cluster, name, tmp_path):
    if name not in cluster:
        pytest.skip(f"jobs/{QUICK[name][0]} does not exist" if python_for(name)
                    else f"no MPICH here: {implementation('mpich')}")
    job = cluster[name]
    status = job.wait(timeout=900)
    assert status == 0, f"sbatch --wait {name}: status {status}\n{job.logs()[-4000:]}"
    script = QUICK[name][0]
    if script == "latency_sweep.sbatch":  # its own layout: results in OUT_DIR
        written = list((job.tmp / "out").glob("*.json")) + list((job.tmp / "out").glob("*.csv"))
        assert written, f"latency_sweep.sbatch wrote nothing to OUT_DIR\n{job.logs()[-3000:]}"
        return
    if script == "figure3.sbatch":  # it checkpoints its runs (it once lost them silently to a module move)
        assert "checkpoints: yes" in job.logs(), job.logs()[-3000:]
    if script not in ("teleport.sbatch", "search.sbatch", "networks.sbatch"):
        assert any(job.tmp.rglob("summary.json")) or any((job.tmp / "out").glob("*")), job.logs()[-3000:]
        return
    run = the_run_dir(job)
    log = (run / "job.log").read_text()
    assert "run ended with status 0" in log
    launcher = "mpirun" if "mpirun" in name else f"srun --mpi={'pmi2' if 'mpich' in name else 'pmix'}"
    assert f"MPI: {'mpich' if 'mpich' in name else 'openmpi'}," in log, log[-2000:]
    assert f"+ {launcher}" in log or f"/{launcher}" in log, log[-2000:]
    if script == "search.sbatch":
        summary = json.loads((run / "summary.json").read_text())
        assert summary["k_search"] == "auto" and summary["n"] == 7
        assert set(summary["candidates"]) == {"1", "2", "4", "7"} and summary["rounds_run"] == 60
        assert not (run / "checkpoints").exists()
        return
    # teleport / networks: compare -> one directory per algorithm, checkpoints, table
    comparison = json.loads((run / "comparison.json").read_text())
    assert set(comparison) == {"teleportation", "dsgd"}
    for algorithm in ("teleportation", "dsgd"):
        summary = json.loads((run / algorithm / "summary.json").read_text())
        assert summary["n"] == (4 if script == "teleport.sbatch" else 2)
        assert summary["rounds_run"] == (60 if script == "teleport.sbatch" else 20)
        assert (run / algorithm / "checkpoints").is_dir()
    if script == "networks.sbatch":
        problem = json.loads((run / "teleportation" / "config.json").read_text())["problem"]
        assert problem == ("digits" if "digits" in PROBLEMS else "quadratic")
        return
    # the quick teleport job equals the simulator (same flags: n = 4, k = 4, 60 rounds)
    assert sim_main(["--nodes", "4", "--rounds", "60", "--log-every", "10",
                     "--out", str(tmp_path / "sim")]) == 0
    for algorithm in ("teleportation", "dsgd"):
        assert numbers(run / algorithm / "metrics.jsonl") == numbers(tmp_path / "sim" / algorithm / "metrics.jsonl")


@pytest.mark.parametrize("name", LIMIT_JOBS)
def test_time_limit_requeue_resumes_and_equals_an_uninterrupted_run(cluster, tmp_path, name):
    """--time=1 (and no early USR1): SLURM sends SIGTERM at the limit, the srun ranks agree
    on a round, write a checkpoint and exit 75, the script requeues the job, the new attempt
    resumes from the newest checkpoint. The final metrics equal the simulator's
    uninterrupted run bit for bit."""
    if name not in cluster:
        pytest.skip(f"no MPICH here: {implementation('mpich')}")
    job = cluster[name]
    status = job.wait(timeout=1000)
    logs = job.logs()
    assert status == 0, f"status {status}\n{logs[-4000:]}"
    run = the_run_dir(job)
    log = (run / "job.log").read_text()
    assert "DUE TO TIME LIMIT" in logs and "requeueing (restart 1" in log, logs[-3000:]
    # the next attempt continued from a checkpoint (normally the one the ranks wrote on
    # SIGTERM, "stopped by SIGTERM at round r"; on a very busy host maybe a periodic one)
    assert re.search(r"resuming from .*/checkpoints/round-\d+", log), log[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rounds_run"] == LIMIT_ROUNDS
    assert sim_main(["--nodes", "4", *LIMIT_ARGS.split(), "--out", str(tmp_path / "sim")]) == 0
    reference = numbers(tmp_path / "sim" / "metrics.jsonl")
    assert len(reference) == LIMIT_ROUNDS // 10 + 1
    assert numbers(run / "metrics.jsonl") == reference
    assert summary["final_error"] == json.loads((tmp_path / "sim" / "summary.json").read_text())["final_error"]
