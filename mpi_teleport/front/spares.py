"""A hot spare's life in an MPI command line's job (``--elastic --spares S``;
mpi_teleport/DESIGN.md §11.1; the pool and the wait: :mod:`mpi_teleport.elastic.spares`).

The S spare ranks hold no node and take no part in the rounds: each waits in
:meth:`SparePool.wait <mpi_teleport.elastic.spares.SparePool.wait>` until the nodes release
it at the end of the run, or until it is woken because nodes died. Then every living
process re-forms the job (:meth:`SparePool.reform`); the lowest waiting spare becomes the
lowest dead node: it
builds that node's problem (its data shard, ``--problem`` factories and TorchProblem
included, keyed by the node id as the dead rank's was) and enters the survivors' recovery
of that round (:func:`mpi_teleport.runtime.engine.execute`, ``joining``), where it receives the node's tokens and
the records; from then on it is that node. Also the job's side of the spares: the ranks
split into nodes and spares (:func:`apart`), an early end that releases the waiting
spares (:func:`end_with_spares`) and the exit after ranks died (:func:`leave`). Nothing
here talks MPI itself.
"""
from __future__ import annotations

import os
import sys


def serve(cfg, pool, local_rank: int, terminator, meeting=None, prepared=None) -> dict | None:
    """Wait as a spare. Returns the run's summary once this process took a node over and
    the run ended, or None when the nodes released it (``pool.released``: their exit
    status). A signal (SIGTERM, SIGUSR1: the job's end) does not end the wait: the nodes
    write their checkpoint first and then release the spares with status 75; a spare
    leaving at once would end the job under mpirun before that checkpoint is written.
    ``meeting``: where a run that ends in an exception hands over the survivors'
    communicator (:class:`~mpi_teleport.elastic.meeting.Meeting`); ``prepared``: the job's
    preparation (:func:`~mpi_teleport.session.prepare.check_job`), whose plan it takes."""
    from . import cli
    from ..session import job
    from ..session.prepare import check_job
    from ..session.runner import RunContext
    from ..elastic.spares import wait_logged
    from ..problems import make_problem
    what, value = wait_logged(pool)  # (tests: a spare may die as it starts waiting)
    if what == "done":
        pool.released = value
        return None
    (algorithm, k), = job.runs_requested(cfg)  # (elastic mode runs one algorithm)
    problem = make_problem(cli.problem_of(cfg), local_rank, local_nodes=[pool.node])  # the dead node's data
    # (the run goes on as that node, from the survivors' round, on the reformed
    # communicator, value[2]: the message that woke this spare said which)
    joining = RunContext(terminator=terminator, pool=pool, meeting=meeting,
                         joining=(pool.round, value))
    return cli.run_one(cfg, algorithm, k, problem, value[2], prepared or check_job(cfg),
                       joining)

def end_with_spares(pool, status: int, meeting, transport) -> None:
    """A run with hot spares ends early (a refusal, a signal's checkpoint): the root (its
    line is out already) releases the waiting spares, the nodes meet (on what the run
    handed ``meeting``), and every process leaves with ``status`` (none leaves first:
    under mpirun an early exit may end the others before the root's line and release)."""
    pool.release(status)
    if not meeting.meet() and transport is not None:  # (nothing handed over: the
        # exception came before the run, on the nodes' first communicator)
        try:
            transport.barrier()
        except Exception:  # noqa: BLE001  (leaving anyway)
            pass
    leave(status)


def apart(cfg, comm):
    """``--spares``: the job's ranks as nodes (the first n) and spares (the last S): the
    pool, this rank's index on its host, and the nodes' transport (None on a spare).
    Every rank refuses alike, before the split, an MPI without ULFM."""
    from ..elastic.spares import SparePool
    from ..elastic.transport import refuse_without_ulfm
    from ..problems import needs_local_rank
    from ..runtime.transport import Transport
    from . import cli

    refuse_without_ulfm()
    if comm.Get_rank() >= cfg.nodes:
        # a spare imports torch now, in the set-up (the nodes wait for it in the Dup
        # below), not beside their rounds nor when it takes a node over
        from ..problems import prepare

        prepare(cli.problem_of(cfg))
    pool = SparePool(comm, cfg.nodes)
    local = pool.local_rank() if needs_local_rank(cli.problem_of(cfg)) else 0  # (collective: all ranks)
    pool.host_nodes = pool.nodes_on_host()  # (collective: all ranks)
    node_comm, _ = pool.node_comm()
    return pool, local, Transport(node_comm) if node_comm is not None else None


def leave(status: int) -> None:
    """End this process now: after ranks died, MPI_Finalize may wait for them (elastic
    mode; the survivors met in a barrier first)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
