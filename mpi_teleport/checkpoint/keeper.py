"""Checkpoints during a run: when to write them (:class:`CheckpointPlan`) and the engine's hooks
(:class:`Keeper`), for either back end."""
from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ..errors import OutputError, Terminated
from ..core.interfaces import Backend
from .find import prune
from ..disk.output import write_atomic
from .store import RUN_MARKER, round_dir, write_manifest

@dataclass(frozen=True)
class CheckpointPlan:
    """Checkpointing of one run (one algorithm of compare); made once, the checkpoint it
    resumes found (:func:`mpi_teleport.session.disk_check.check_disk`)."""

    dir: Path | None  # where its checkpoints go (None: nowhere)
    every: int  # periodic checkpoints every this many rounds (0: none)
    keep: int
    source: Path | None = None  # the checkpoint it resumes from
    manifest: dict | None = None

    @property
    def start(self) -> int:
        return int(self.manifest["round"]) if self.manifest else 0

    @property
    def periodic(self) -> bool:
        """Periodic (and final) checkpoints are asked for and have a place to go."""
        return self.dir is not None and self.every > 0

    def due(self, r: int, rounds: int) -> bool:
        """A periodic checkpoint after round r (not at 0 and not at the end: the final
        checkpoint is written separately)."""
        return self.periodic and 0 < r < rounds and r % self.every == 0


# ----------------------------------------------------------------------------- runtime
class Keeper:
    """Checkpoints, resume and signal stops of one run, for either back end.

    The engine calls :meth:`restore` before the loop, :meth:`after_round` after every
    round and :meth:`finish` at the end. After a round, on logging and checkpoint rounds
    (every round in one process, where it costs nothing) the processes agree on whether
    any got a signal (one Allreduce of an integer under MPI), write the periodic or the
    signal's checkpoint, and stop together with :class:`signals.Terminated`; between them
    the :class:`~mpi_teleport.runtime.stop_watch.StopWatch` finds the signal within about
    a second, and the processes stop at the round it names.
    """

    def __init__(self, plan: CheckpointPlan, backend: Backend, recorder, terminator=None, *, settings: dict,
                 spec, logging, resume_from=None, watch=None):
        self.plan, self.backend, self.rec, self.terminator = plan, backend, recorder, terminator
        self.settings, self.spec = settings, spec
        self.logging = logging  # (when records are taken; stop at the target or not)
        self.resume_from = resume_from
        self.wall_offset = float(plan.manifest.get("wall_s", 0.0)) if plan.manifest else 0.0
        self._t0 = time.perf_counter() - self.wall_offset
        self._last_round: int | None = None  # the latest round after which the loop ran
        # The lineage: a resumed run continues its source's id, so pruning removes the
        # checkpoints of this run and its ancestors only, never anyone else's.
        source_id = (plan.manifest or {}).get("run_id")
        self.run_id = source_id if isinstance(source_id, str) else uuid.uuid4().hex
        if terminator is not None:  # (the latency layer cuts a real-clock delay short)
            backend.interrupt_on(lambda: bool(terminator.signum))
        # between logging rounds (a StopWatch, or None): a signal stops the run within
        # about a second
        self.watch = watch

    @property
    def start(self) -> int:
        """The round the run continues from (0 for a fresh run)."""
        return self.plan.start

    @property
    def resumed(self) -> bool:
        return self.plan.manifest is not None

    def rounds(self, start: int, stop: int) -> range:
        """The rounds left of [start, stop): none after the final checkpoint of a run that
        stopped at its target (--stop-at-target)."""
        m = self.plan.manifest
        stopped = bool(m and self._stopped_at_target(m))
        return range(stop, stop) if stopped else range(min(max(start, self.start), stop), stop)

    def restore(self):
        """(directory, manifest) of the checkpoint to resume, after restoring the recorder
        (root) and this process's logical clock; None for a fresh run."""
        m = self.plan.manifest
        if m is None:
            return None
        if self.rec is not None and m.get("recorder") is not None and (
                self.backend.root or self.backend.elastic):  # (elastic: any survivor may write)
            self.rec.restore(m["recorder"])
            if self.backend.root and self._finished(m) and hasattr(self.rec, "last_x"):
                # (no round runs: the final model is the checkpoint's, for Result.x)
                from .store import load_matrix

                self.rec.last_x = load_matrix(self.plan.source, m)["x"]
        self.backend.restore_clock(m.get("clocks_us"))
        self._t0 = time.perf_counter() - self.wall_offset
        return self.plan.source, m

    @property
    def returns_finished(self) -> bool:
        """The checkpoint resumed ends this run: no round runs, its result is returned."""
        m = self.plan.manifest
        return m is not None and self._finished(m)

    def resume_line(self, where) -> str | None:
        """What a resume does, in one line for the root to print (None: a fresh run):
        continues the run ``where`` from its checkpoint's round, extends a finished run
        given more rounds, or returns a finished one as it ended."""
        m = self.plan.manifest
        if m is None:
            return None
        r, total = int(m["round"]), self.spec.total_rounds
        if self._finished(m):
            how = "finished" if r >= total else "stopped at its target"
            return f"{where} {how} at round {r}: returning it"
        if m.get("final"):
            return f"extending {where}: it ended at round {r}; running it on to round {total}"
        return f"resuming {where} from round {r} of {total}"

    def _finished(self, m: dict) -> bool:
        """Whether the checkpoint ends this run: its last round, or a stop at the target
        that this run keeps."""
        return int(m["round"]) >= self.spec.total_rounds or self._stopped_at_target(m)

    def _stopped_at_target(self, m: dict) -> bool:
        """The checkpoint is the final one of a run that stopped at its target, and this run
        keeps that stop (a run that ended without reaching it runs on when given more)."""
        return bool(m.get("final") and self.logging.stop_at_target
                    and (m.get("recorder") or {}).get("rounds_to_target") is not None)

    def gate(self) -> None:
        """Before the first round (a collective, in place of a barrier): a signal caught
        during the set-up (a slow problem factory, data loading) stops the run now, on
        every process together, rather than at the first logging round."""
        term = self.terminator
        signum = self.backend.agree(term.signum if term is not None else 0)
        if signum:
            if term is not None:
                term.commit()
            # (a resumed run's checkpoint still stands: resuming it again is right)
            raise Terminated(signum, self.start, self.plan.source if self.resumed else None,
                             self.resume_from, before_start=True)

    def after_round(self, r: int, stop: bool, total: int) -> None:
        self._last_round = r
        if stop or r >= total:
            return  # the run ends here anyway: a signal now changes nothing
        due = self.plan.due(r, total)
        term = self.terminator
        flag = term.signum if term is not None else 0
        if self.backend.checks_every_round:
            if not due and not flag:
                return
        elif r % self.logging.log_every and not due:  # neither a logging nor a checkpoint round:
            # the watch's agreement, started a period ago, decides (no waiting)
            if self.watch is None or not self.watch.boundary(flag):
                return
        paused = self.rec.pause()
        signum = self.backend.agree(flag)  # (after a watch's stop: its signal, agreed again)
        if signum and term is not None:
            term.commit()  # the stop is decided: a second signal cannot change it now
        if signum:
            self.close()
        path = None
        if due or (signum and self.plan.dir is not None):
            path = self._save(r, "signal" if signum else "every")
        self.rec.resume(paused)
        if signum:
            raise Terminated(signum, r, path, self.resume_from)

    def close(self) -> None:
        """No reduction of the watch outlives the run (every process, at the same point)."""
        if self.watch is not None:
            self.watch.close()

    def finish(self, summary: dict | None) -> Path | None:
        """The final checkpoint (collective) when periodic checkpoints were asked."""
        self.close()
        if not self.plan.periodic or self._last_round is None:
            return None  # (nothing ran: resumed from the end, its checkpoint stands)
        return self._save(self._last_round, "final", summary)

    def emergency(self, r: int) -> Path | None:
        """Elastic, too few survivors: the checkpoint of round r's start (with the lost
        tokens restored) where a checkpoint directory is known."""
        if self.plan.dir is None:
            return None
        return self._save(r, "too-few-survivors")

    def _save(self, r: int, reason: str, summary=None) -> Path:
        backend = self.backend
        base = cast(Path, self.plan.dir)  # (every caller checked it: a periodic plan has one)
        directory = round_dir(base, r)
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a full disk; a file of that name put there meanwhile
            raise OutputError(directory, exc) from None
        if backend.root:  # before any array: an interrupted write is still known as ours
            write_atomic(directory / RUN_MARKER, self.run_id + "\n")
        arrays = backend.save(directory)
        clocks = backend.clocks(r)
        backend.barrier()  # every token file is in place
        if backend.root:
            spec = self.spec
            manifest = {
                "round": r,
                "run_id": self.run_id,
                "reason": reason,  # every | signal | final
                "final": reason == "final",
                "algorithm": spec.algorithm,
                "variant": spec.variant,
                "k": spec.tokens,
                "n": spec.nodes,
                "dim": backend.dim,
                # v's length is dim x this (Adam's two moments; absent: momentum, dim)
                **({"state_slots": spec.state_slots} if spec.optimizer is not None else {}),
                "layout": backend.layout,
                "arrays": arrays,
                "backend": backend.name,
                "config": self.settings,
                "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
                "slurm_restart_count": os.environ.get("SLURM_RESTART_COUNT"),
                "recorder": self.rec.state() if self.rec is not None else None,
                "wall_s": time.perf_counter() - self._t0,
                "clocks_us": clocks,
                "summary": summary,
            }
            if backend.elastic:  # a resumed run leaves the lost nodes out (elastic.Living)
                manifest["lost"] = list(backend.losses)
                if backend.replacements:  # (nodes a spare took over: in the run, tokens restored)
                    manifest["replaced"] = list(backend.replacements)
                if spec.algorithm == "dsgd":  # (the lost nodes' replicas were dropped)
                    manifest["tokens"] = spec.tokens - len(backend.losses)
            if self.rec is not None:
                self.rec.files.flush()  # metrics.jsonl up to this round, as the checkpoint has it
            write_manifest(directory, manifest)
            prune(base, self.plan.keep, self.run_id)
        return directory


