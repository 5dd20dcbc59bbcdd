"""Internal: checkpoint and resume; the public way in is the checkpoint settings (the
API's :class:`mpi_teleport.Checkpoints`), the command ``python -m mpi_teleport.checkpoint``
and the layout on disk below.

Checkpoint and resume: ``--checkpoint-every R``, ``--checkpoint-dir DIR``, ``--resume DIR``.

A checkpoint holds the state of a run at the *start* of round r: every token (its model
x, its momentum v, any further per-token arrays), the recorder (the metrics logged so
far, rounds_to_target, elapsed time) and, with the latency layer, every rank's logical
clock. All randomness is keyed by (seed, node, round) (``rng.py``), so nothing else is
needed: a resumed run continues with rounds r..T-1 and its ``metrics.jsonl`` equals that
of an uninterrupted run bit for bit (``time_s`` aside).

Layout (default directory ``<out>/checkpoints``; with ``compare`` one per algorithm,
``<out>/<algorithm>/checkpoints``, or ``DIR/<algorithm>`` under ``--checkpoint-dir DIR``)::

    round-00000120/          the state at the start of round 120
        token-000000.npz     MPI: token 0's arrays (x, v, ...), written by its holder
        ...                  (one file per token; k files)
        x.npy, v.npy         simulator: all k tokens as (k, d) matrices
        MANIFEST.json        written LAST (MPI: by rank 0 after a barrier): the round,
                             the full config, the recorder state, the clocks; a
                             directory without it is incomplete and ignored
    round-00000100/          the previous one (--keep-checkpoints, default 2)

Each manifest carries the run id of its lineage (a fresh run draws one, a resumed run
keeps its source's); pruning removes only round-* directories of that id (an incomplete
one is known by its ``.run_id`` marker, written before any array), so nothing else that
lies in a checkpoint directory is ever deleted. A manifest or array file that is there but
wrong (unreadable, wrong types, a round other than its directory's name, a pickled or
object array, a wrong shape, a truncated file) stops a resume with one line naming the
fault; it is never skipped in favour of older data.

Every file is written under a temporary name in the same directory, fsync'ed and
renamed, so a reader never sees half a file; a job killed while writing leaves an
incomplete directory that resume skips and the next checkpoint prunes. Either backend
reads either layout, so a simulator checkpoint resumes under MPI and vice versa.

``--resume DIR`` accepts a run directory (the ``--out`` of the run), a checkpoint
directory or one ``round-*`` directory, and continues from the newest complete
checkpoint. Settings not given on the command line are taken from the checkpoint; those
that determine the numbers (problem, k, topology, lr, seed, ...) must not change, while
``--rounds`` (at least the checkpoint's round), ``--out``, ``--log-every``, ``--variant``,
``--latency`` and the checkpoint flags may.

Modules: :mod:`.store` (layout, atomic I/O), :mod:`.find` (discovery, pruning),
:mod:`.keeper` (the engine's hooks); the checks of a resume (its recorded settings
against the run's, its files) and of the checkpoint directory, for the command line and
the API alike, are :mod:`mpi_teleport.session.resume`'s.

    python -m mpi_teleport.checkpoint newest DIR   # path of the newest complete checkpoint
    python -m mpi_teleport.checkpoint show DIR     # its manifest, without the records
"""
from .find import any_checkpoint, complete, locate, newest, owner, prune  # noqa: F401
from .keeper import Keeper, CheckpointPlan  # noqa: F401
from .store import (FORMAT, LAYOUT_MATRIX, LAYOUT_TOKENS, MANIFEST, RUN_MARKER,
                    DamagedCheckpointError, EarlierScheduleError, check_arrays,
                    check_manifest, load_matrix, load_token, read_manifest, restore_token,
                    round_dir, save_matrix, save_token, stored_tokens, token_arrays,
                    token_file, write_manifest)
