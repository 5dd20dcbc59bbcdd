"""Tests kill a rank at a chosen point of an elastic run (a lost rank, on purpose).

``MPI_TELEPORT_TEST_DIE=NODE@ROUND[:save|:stop],...`` names where: at round ROUND's start
(default), or inside round ROUND's checkpoint (``:save``); the process SIGKILLs itself
(``:stop``: SIGSTOP, a hung rank). A spare's id with round 0 kills that spare as it
starts waiting. ``MPI_TELEPORT_TEST_DIE_ONCE=DIR`` makes each entry fire once (rounds
redone after a rollback do not kill again). Unset, :func:`die_here` does nothing; users
never set these.
"""
from __future__ import annotations

import os
import signal

TEST_DIE = "MPI_TELEPORT_TEST_DIE"  # NODE@ROUND[:save|:stop],...: tests kill a rank there
TEST_DIE_ONCE = "MPI_TELEPORT_TEST_DIE_ONCE"  # a directory: each entry above fires once


def die_here(node: int, r: int, where: str, before=None) -> None:
    """Tests only: SIGKILL (``:stop``: SIGSTOP) this process at round r's start ("start")
    or inside round r's checkpoint ("save") when $MPI_TELEPORT_TEST_DIE names it, after
    ``before()`` (the agreement under way completed: the rank dies after it, as a rank
    killed there would with every agreement waited for)."""
    for item in filter(None, os.environ.get(TEST_DIE, "").split(",")):
        spot, _, how = item.partition(":")
        who, _, when = spot.partition("@")
        at = "save" if how == "save" else "start"
        if int(who) == node and int(when) == r and at == where:
            once = os.environ.get(TEST_DIE_ONCE)
            if once:  # each entry kills one process (rounds redone after a rollback: not again)
                mark = os.path.join(once, f"died-{item.replace(':', '-')}")
                if os.path.exists(mark):
                    continue
                open(mark, "w").close()
            if before is not None:
                before()
            os.kill(os.getpid(), signal.SIGSTOP if how == "stop" else signal.SIGKILL)
