"""The errors a user can act on (a leaf module: it imports nothing of the package).

The command line prints each as one line on stderr and exits with status 2; the Python
API raises them as they are.
"""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os
    from pathlib import Path


class UsageError(ValueError):
    """Bad input: a flag, a setting, a file. The message says what was wrong and what to do.

    ``agreed``: raised by every process of a run together (a refusal agreed at start, a
    verdict shared by rank 0), so it passes the runtime's guard on every rank instead of
    ending the job (``runtime.collective.agreed`` sets it; False otherwise)."""

    agreed: bool = False


class NonFiniteError(RuntimeError):
    """The loss became NaN or infinite: the run stops with a message naming round and token."""


class DatasetMissingError(ValueError):
    """A data set's files are absent, unreadable or corrupted (message: one line)."""


class OutputError(OSError):
    """Writing an output or checkpoint file failed (a full disk, a quota, a directory made
    read-only): one line naming the file and the system's reason. The command line prints
    it and exits with status 1; files written before stay intact (every write is to a
    temporary name, renamed when complete), so the newest complete checkpoint still
    resumes."""

    def __init__(self, path: str | os.PathLike[str], exc: OSError) -> None:
        super().__init__(exc.errno, exc.strerror or str(exc))
        self.filename = str(path)
        full = exc.errno in (28, 122)  # ENOSPC, EDQUOT
        self.message = (f"cannot write {path}: {exc.strerror or exc}"
                        + ("; free some space (the newest complete checkpoint, if any, still "
                           "resumes)" if full else ""))

    def __str__(self) -> str:
        return self.message


class Terminated(Exception):
    """Raised on every rank at the agreed round after a signal (and the final checkpoint)."""

    def __init__(self, signum: int, r: int, checkpoint: Path | None = None,
                 resume_from: str | os.PathLike[str] | None = None,
                 before_start: bool = False) -> None:
        self.signum, self.round, self.checkpoint = signum, r, checkpoint
        name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
        if before_start:  # during the set-up: nothing ran, the resumed checkpoint stands
            where = (f"nothing ran; continue with --resume {resume_from or checkpoint.parent}"
                     if checkpoint is not None else "nothing ran; start the run again")
            super().__init__(f"stopped by {name} before round {r} (during the set-up): {where}")
            return
        where = (f"checkpoint written to {checkpoint}; continue with --resume "
                 f"{resume_from or checkpoint.parent}" if checkpoint is not None else
                 "no checkpoint written (give --out or --checkpoint-dir to have one)")
        super().__init__(f"stopped by {name} at round {r}: {where}")


class RankLost(RuntimeError):
    """Elastic mode: a collective failed because a rank died (the communicator is revoked;
    the survivors agree on the loss and go on, mpi_teleport/elastic/)."""


class TooFewSurvivors(RuntimeError):
    """Fewer living nodes than tokens: the run cannot go on (checkpoint, exit 75).

    Fields: ``round``, ``living`` (nodes left), ``k``, ``checkpoint`` (the one written,
    or None), ``all_lost`` (every token's holder died: nothing to restore from) and
    ``root``: this process is the survivors' root, the one that says so (the engine
    raises it on every survivor with its own; one process: True). The survivors meet
    before they leave through what the runner hands its caller (``elastic.meeting.Meeting``),
    not through the exception."""

    round: int
    living: int
    k: int
    checkpoint: Path | None
    all_lost: bool
    root: bool

    def __init__(self, r: int, living: int, k: int, checkpoint: Path | None = None,
                 resume_from: Path | str | None = None, all_lost: bool = False,
                 root: bool = True):
        self.round, self.living, self.k, self.checkpoint = r, living, k, checkpoint
        self.all_lost, self.root = all_lost, root
        if all_lost:  # nothing left to restore from: the newest periodic checkpoint is it
            super().__init__(f"elastic: every token's holder was lost at round {r}, so no "
                             f"token is left to restore the others from: requeue the job "
                             f"and continue with --resume from the newest checkpoint "
                             f"({resume_from or 'the run directory'})")
            return
        where = (f"checkpoint written to {checkpoint}; requeue the job with enough nodes and "
                 f"continue with --resume {resume_from or checkpoint.parent}"
                 if checkpoint is not None else
                 "no checkpoint written (give --out or --checkpoint-dir to have one)")
        super().__init__(f"elastic: only {living} nodes left at round {r}, fewer than "
                         f"k={k} tokens: {where}")


# How a message spells a setting (the front end's words: a flag or a keyword).
@dataclass(frozen=True)
class Naming:
    """How a message spells a setting: ``--eval-every`` (command line) or ``eval_every``
    (Python), and a setting with its value: ``--k 9`` or ``k=9``. ``user_gave``: the settings
    the user gave, where the others are not taken from a checkpoint (a script's flags:
    a message names only these as flags; None: every setting is the user's to give)."""

    cli: bool
    user_gave: frozenset[str] | None = None

    def name(self, field: str) -> str:
        return "--" + field.replace("_", "-") if self.cli else field

    def given(self, field: str, value: object) -> str:
        return f"{self.name(field)} {value}" if self.cli else f"{field}={value!r}"

    def retell(self, exc: UsageError) -> UsageError:
        """A message written with command-line flags (the latency model's), spelt for
        this entry point."""
        if self.cli:
            return exc
        text = str(exc)
        for flag in ("--latency", "--compute-time", "--clock"):
            text = text.replace(flag, flag[2:].replace("-", "_"))
        return UsageError(text)


CLI, API = Naming(cli=True), Naming(cli=False)
