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
the records; from then on it is that node. Nothing here talks MPI.
"""
from __future__ import annotations


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

