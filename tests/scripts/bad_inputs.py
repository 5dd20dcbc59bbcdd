"""Feed many bad command lines to mpi_teleport.run inside one MPI job (tests only).

    bad_inputs.py CASES.json RESULTS_DIR

CASES.json is a list of cases: an argument list, or {"argv": [...], "perturb": MODE} for a
rank out of step with the others: rank 2 alone gets ``--lr 0.002`` appended (MODE
``config``, as if its config file had been edited), computes another schedule
(``schedule``, as if it ran another numpy or mpi_teleport), or gets ``--k 0``
(``badflag``). Every rank calls run.main on each case in turn, capturing its own output,
and writes RESULTS_DIR/rank<r>.json: [{"argv", "status", "stderr", "stdout"}, ...]. A case
that started any exchange on one rank but not on another would hang here.
"""
import contextlib
import io
import json
import sys
from pathlib import Path

from mpi4py import MPI

from mpi_teleport import run
from mpi_teleport.core import schedule

VICTIM = 2


@contextlib.contextmanager
def out_of_step(mode: str | None, argv: list):
    """argv as this rank runs it, with rank VICTIM perturbed by `mode` meanwhile."""
    if mode is None or MPI.COMM_WORLD.Get_rank() != VICTIM:
        yield argv
        return
    if mode == "config":
        yield [*argv, "--lr", "0.002"]
    elif mode == "badflag":
        yield [*argv, "--k", "0"]
    elif mode == "schedule":
        real = schedule.holders_block  # holders(...) is its first row

        def shifted(seed, n, k, t0, count):
            return (real(seed, n, k, t0, count) + 1) % n

        schedule.holders_block = shifted
        try:
            yield argv
        finally:
            schedule.holders_block = real
    else:
        raise SystemExit(f"unknown mode {mode!r}")


cases = json.loads(Path(sys.argv[1]).read_text())
out = Path(sys.argv[2])
rank = MPI.COMM_WORLD.Get_rank()
results = []
for case in cases:
    argv, mode = (case, None) if isinstance(case, list) else (case["argv"], case["perturb"])
    err, std = io.StringIO(), io.StringIO()
    with out_of_step(mode, argv) as mine, contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(std):
        status = run.main(mine)
    results.append({"argv": mine, "status": status, "stderr": err.getvalue(), "stdout": std.getvalue()})
out.mkdir(parents=True, exist_ok=True)
(out / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
MPI.COMM_WORLD.Barrier()
