"""A hot spare's life in an MPI job (``--elastic --spares S``; mpi_teleport/DESIGN.md §11.1).

The S spare ranks hold no node and take no part in the rounds: each waits in
:meth:`SparePool.wait <mpi_teleport.runtime.transport.SparePool.wait>` (asleep between looks for
a message: about 0.4 % of a core) until the nodes release it at the end of the run, or until
it is woken because nodes died. Then every living process re-forms the job
(:meth:`SparePool.reform`); the lowest waiting spare becomes the lowest dead node: it
builds that node's problem (its data shard, ``--problem`` factories and TorchProblem
included, keyed by the node id as the dead rank's was) and enters the survivors' recovery
of that round (:func:`mpi_teleport.runtime.engine.execute`, ``joining``), where it receives the node's tokens and
the records; from then on it is that node. Nothing here talks MPI.
"""
from __future__ import annotations

import json
import os
import resource
import time
from pathlib import Path

SPARE_LOG = "MPI_TELEPORT_SPARE_LOG"  # a directory: each spare writes spare-<id>.json there


def serve(cfg, pool, local_rank: int, terminator, meeting=None, prepared=None) -> dict | None:
    """Wait as a spare. Returns the run's summary once this process took a node over and
    the run ended, or None when the nodes released it (``pool.released``: their exit
    status). A signal (SIGTERM, SIGUSR1: the job's end) does not end the wait: the nodes
    write their checkpoint first and then release the spares with status 75; a spare
    leaving at once would end the job under mpirun before that checkpoint is written.
    ``meeting``: where a run that ends in an exception hands over the survivors'
    communicator (:class:`~mpi_teleport.session.runner.Meeting`); ``prepared``: the job's
    preparation (:func:`~mpi_teleport.session.prepare.check_job`), whose plan it takes."""
    from . import cli
    from ..session import job
    from ..session.prepare import check_job, prepare
    from ..session.runner import RunContext, train
    from ..runtime.backends.elastic import _test_hook
    from ..problems import make_problem
    _test_hook(pool.me, 0, "start")  # (tests: a spare that dies while it waits)
    wall, cpu = time.perf_counter(), _cpu_s()
    what, value = pool.wait()
    _log_wait(pool.me, what, time.perf_counter() - wall, _cpu_s() - cpu)
    if what == "done":
        pool.released = value
        return None
    (algorithm, k), = job.runs_requested(cfg)  # (elastic mode runs one algorithm)
    problem = make_problem(cli.problem_of(cfg), local_rank, local_nodes=[pool.node])  # the dead node's data
    settings = prepare(problem, cli.run_values(cfg, algorithm, k), value[2],  # (the
                       prepared=prepared or check_job(cfg), job=cfg)  # reformed comm)
    # (the run goes on as that node, from the survivors' round, on the reformed
    # communicator: the message that woke this spare said which)
    joining = RunContext(terminator=terminator, pool=pool, meeting=meeting,
                         joining=(pool.round, value))
    return train(problem, settings, None, joining).summary


def _cpu_s() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def _log_wait(spare: int, outcome: str, wall_s: float, cpu_s: float) -> None:
    """Benchmarks and tests: how long the spare waited and the CPU time it used meanwhile."""
    where = os.environ.get(SPARE_LOG)
    if not where:
        return
    path = Path(where) / f"spare-{spare}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"spare": spare, "outcome": outcome, "wait_s": wall_s,
                                "cpu_s": cpu_s}) + "\n")
