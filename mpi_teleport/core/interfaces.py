"""The interfaces the engine and the back ends are written against, as typing Protocols.

* :class:`Backend`: how token vectors move and are stepped (the simulator's
  :class:`~mpi_teleport.runtime.backends.local.LocalBackend`, one node per rank
  :class:`~mpi_teleport.runtime.backends.mpi.MpiBackend`); all the engine
  (:func:`mpi_teleport.runtime.engine.execute`) and the checkpoint keeper use. Elastic
  mode's round boundary (``keep``, ``settle``, ``recover``, ...) is part of it: the one
  loop calls it on every back end, and a plain one does nothing there.
* :class:`TokenTransport`: what a rank's back end moves vectors through (MPI's
  :class:`~mpi_teleport.runtime.transport.Transport`, the latency layer's
  :class:`~mpi_teleport.latency.layer.LatencyTransport`, the tests' thread loopback).
  What a transport can do beyond the common part is *declared* by two attributes, never
  found by probing: ``has_channels`` (it is also a :class:`ChannelTransport`: persistent
  channels, which the compiled fast path :mod:`mpi_teleport.runtime.backends.compiled` needs) and
  ``has_clock`` (it is also a :class:`ClockedTransport`: a logical clock stamped on every
  message, so each message must be posted round by round).
  :class:`FaultTolerantTransport` adds what elastic mode needs (MPI's
  :class:`~mpi_teleport.elastic.transport.ElasticTransport`: agreement and shrinking
  over the survivors).
* :class:`RunRecorder`: what the root records through (``metrics.Recorder``,
  ``search.SearchRecorder``); :class:`CheckpointedRecorder` adds the state a checkpoint
  keeps.

Nothing here imports an implementation: the protocols are the contract, the classes
name them in their docstrings, tests/test_interfaces.py checks that each implementation
has every member.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .evaluation import Evaluations
    from .schedule import Phase

# Message kinds (a tag says the round and the kind): a token's y (the gossip input), its
# momentum, its model (Alg. 1's fetch, line 8).
KIND_Y, KIND_MOMENTUM, KIND_MODEL, KIND_SPARE = range(4)
N_KINDS = 4

# (peer, tag, contiguous array): one per-round message, as the transport takes it
Message = tuple[int, int, np.ndarray]


@runtime_checkable
class TokenTransport(Protocol):
    """Point-to-point messages of a round and the few collectives of logging, start-up and
    checkpoints. Ranks are node ids; a message to oneself is a local copy."""

    rank: int
    size: int
    has_channels: bool  # also a ChannelTransport
    has_clock: bool  # also a ClockedTransport

    # -- per-round messages (Isend/Irecv under MPI) -------------------------------------
    def tag(self, t: int, kind: int) -> int:
        """The tag of round t's messages of ``kind`` (transport.KIND_*): a message of round
        t can never be consumed in another round."""

    def post_recvs(self, recvs: list[Message], pending: Any = None) -> Any:
        """Post receives [(source, tag, buffer)]; returns the pending exchange."""

    def post_sends(self, sends: list[Message], pending: Any = None) -> Any:
        """Post sends [(dest, tag, array)]; the arrays must not change until :meth:`wait`."""

    def wait(self, pending: Any) -> None:
        """Complete every request of ``pending``."""

    def meanwhile(self, pending: Any, work: Iterator[Any]) -> None:
        """Advance ``work`` (computation that needs none of these messages, one short step
        per ``next``: the next round's x-independent part of the step, ``prepare`` of the
        problem contract) while ``pending`` (what :meth:`post_sends` returned, or a list
        of started channels) completes, keeping the messages moving between its steps.
        Returns when the messages are complete or the work is done, whichever comes
        first; the work's owner finishes the rest, so stopping early changes no number.
        :meth:`wait` (or ``wait_all``) still follows."""

    def exchange(self, sends: list[Message], recvs: list[Message]) -> None:
        """Post the receives, then the sends, and wait for all of them."""

    # -- collectives (logging rounds, checkpoints, start-up) ---------------------------------
    def gather_rows(self, row: np.ndarray | None, holders: np.ndarray, d: int,
                    dtype: npt.DTypeLike = np.float64) -> np.ndarray | None:
        """Rank 0 gets the k token rows (row of token m from rank holders[m]) in token
        order; other ranks None."""

    def bcast_array(self, buf: np.ndarray) -> np.ndarray:
        """Rank 0's ``buf`` into every rank's ``buf``."""

    def gather_rows_in_order(self, rows: np.ndarray) -> np.ndarray | None:
        """Every rank's float64 rows stacked in rank order on rank 0 (None elsewhere)."""

    def bcast(self, obj: Any) -> Any:
        """Rank 0's object on every rank."""

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's object on rank 0, in rank order (None elsewhere)."""

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's object on every rank, in rank order."""

    def agree_max(self, value: int) -> int:
        """The largest ``value`` over the ranks, on every rank."""

    def agree_max_start(self, values: list[int]) -> Any:
        """The elementwise largest of ``values`` over the ranks, begun without waiting: a
        handle whose ``wait()`` gives the list (the stop watch, runtime/stop_watch.py)."""

    def reduce_max(self, value: float) -> float | None:
        """The largest ``value`` over the ranks on rank 0 (None elsewhere)."""

    def barrier(self) -> None:
        """Wait for every rank."""

    def abort(self, code: int = 1) -> None:
        """End every rank of the job now."""

    def close(self) -> None:
        """The run on this transport is over: anything still held for it goes out (the
        latency layer's deferred sends) and its own resources are freed. Collectives
        still work; the communicator itself belongs to whoever created the transport."""


@runtime_checkable
class ChannelTransport(TokenTransport, Protocol):
    """A transport with persistent channels (``has_channels``): a channel is a request
    bound once to (direction, peer, kind, buffer) and started every round that moves
    that buffer between those two ranks (MPI's Send_init/Recv_init, Startall, Waitall)."""

    def send_channel(self, buf: np.ndarray, dest: int, kind: int) -> list[Any]:
        """The persistent send of ``buf`` to ``dest`` (made on first use): a list of
        requests (a large buffer travels in pieces), started and completed together."""

    def recv_channel(self, buf: np.ndarray, source: int, kind: int) -> list[Any]:
        """The persistent receive into ``buf`` from ``source`` (made on first use): a list
        of requests, as :meth:`send_channel`."""

    def channel_spans(self, buf: np.ndarray, peer: int) -> list[tuple[int, int]]:
        """The flat element ranges [start, stop) of ``buf`` carried by the requests of its
        channel with ``peer``, in order: a channel's pieces may be started and completed
        one by one (the compiled rounds send a block of y as soon as it is computed and
        sum a block of the inputs as soon as it is in)."""

    def start(self, channels: list[Any]) -> None:
        """Start ``channels`` (a send's data is what its buffer holds now)."""

    def wait_all(self, channels: list[Any]) -> None:
        """Complete ``channels``."""

    def release_channels(self, buffers: Iterable[np.ndarray | None] | None = None) -> None:
        """Free the channels of ``buffers`` (all when None)."""


@runtime_checkable
class ClockedTransport(TokenTransport, Protocol):
    """A transport with a logical clock (``has_clock``, the latency layer): every message
    carries its sender's clock, so messages are posted round by round, never through
    persistent channels."""

    clock_us: float  # this rank's logical clock, microseconds
    interrupted: Callable[[], bool]  # a stop was asked: cut real-clock delays short

    def advance(self, us: float) -> None:
        """Add compute time to the logical clock."""

    def flush(self) -> None:
        """Hand every message still held back (real-clock delays) to the network."""

    @property
    def shares_host_links(self) -> bool:
        """Whether the model's bandwidth is that of host links several ranks share
        (``hosts:``): the layer then needs every round's messages (:meth:`plan_round`)."""

    def plan_round(self, phase: Any, t: int, topology: Any, variant: str, momentum: bool,
                   nbytes: int) -> None:
        """Before round t of ``phase``: the host links' loads of its messages (tokens of
        ``nbytes``), as the simulator's oracle computes them."""

    def virtual_time_s(self) -> float | None:
        """The largest logical clock over the ranks, seconds, on rank 0 (collective)."""


@runtime_checkable
class FaultTolerantTransport(TokenTransport, Protocol):
    """A transport that survives the death of ranks (elastic mode; MPI's
    ``mpi_teleport.elastic.transport.ElasticTransport`` over ULFM). Ranks keep their node
    ids (``rank``); the survivors' root is ``index`` 0. Per-round messages never raise (a failure is
    remembered); a collective that fails raises :class:`~mpi_teleport.errors.RankLost`."""

    index: int  # this node's place among the survivors (0: the root, which writes)
    spares: int  # the hot spares the job started with (0: none)
    shrunk: bool  # ranks died: the run went on over a smaller communicator
    replaced: dict[int, int]  # the last shrink's {node: spare that took it over}
    agreed: int  # the last settle's ``value`` bits, ANDed over the survivors

    def settle(self, ok: bool = True, value: int = 0) -> bool:
        """Collective over the survivors: True when every rank finished the round and none
        saw a failure (MPI_Comm_agree); ``value``'s bits are agreed too (``agreed``)."""

    def start_agreement(self, ok: bool = True) -> Any:
        """:meth:`settle` started without waiting (MPIX_Comm_iagree), for
        :meth:`finish_agreement`; every survivor starts the same ones in the same order."""

    def finish_agreement(self, pending: Any) -> bool:
        """The outcome of a :meth:`start_agreement` (waits for it)."""

    def shrink(self, r: int = -1) -> list[int]:
        """Acknowledge the failures, go on over the survivors (hot spares take dead nodes
        over, ``replaced``); returns the nodes that died, the same on every survivor."""


@runtime_checkable
class Backend(Protocol):
    """Where the tokens live and how a round moves them; all the engine uses. Collective
    methods are called by every process in the same order (trivial in one process)."""

    name: str  # 'sim' or 'mpi' (summaries, manifests)
    layout: str  # checkpoint layout it writes (checkpoint.LAYOUT_*)
    root: bool  # this process writes the files
    checks_every_round: bool  # signals are looked at every round (else at logging rounds)
    elastic: bool  # lost nodes are survived: keep/settle/recover (mpi_teleport/elastic/)
    losses: Any  # the nodes lost so far, as recorded (elastic.survivors.loss_records); empty otherwise
    replacements: Any  # the nodes a spare took over (elastic.survivors.replacement_records); empty otherwise
    spares: int  # the spares the run started with (0: none)
    agree_every: int  # elastic: the survivors agree every this many rounds (--agree-every; else 1)
    rollback_to: int | None  # elastic, after a failed settle: the round to go back to (None: the last kept)

    def begin(self, phase: Phase, start: int, x0: np.ndarray,
              restore: tuple[Path, dict[str, Any]] | None = None) -> None:
        """Place the tokens of round ``start`` of ``phase`` (a schedule.Phase): x0 on every
        token, or the checkpoint ``restore`` = (directory, manifest)."""

    def step(self, t: int) -> None:
        """Round t of every run of the phase (Algorithm 3 or 1)."""

    def tokens(self, run: int) -> np.ndarray | None:
        """Collective: run ``run``'s token matrix (rows in token order) on the root."""

    def evaluate(self, problem: Any, x: np.ndarray | None, split: str = "test") -> Any:
        """Collective: the metrics of the root's token matrix x, on the root (``evaluate``'s
        dict for "test", ``validate``'s number for "validation"; None elsewhere)."""

    def training_metrics(self, problem: Any, t: int) -> dict[str, float]:
        """Collective: the mean of each value the problem reports of round t's batches
        over that round's active nodes, on the root ({} elsewhere or when none are)."""

    def virtual_time_s(self, r: int) -> float | None:
        """Collective: the virtual time after round r (None without the latency model)."""

    def clocks(self, r: int) -> list[float] | None:
        """Collective: every node's logical clock after round r, for a checkpoint."""

    def restore_clock(self, clocks: list[float] | None) -> None:
        """Continue the logical clock from a checkpoint's ``clocks``."""

    def interrupt_on(self, asked: Callable[[], bool]) -> None:
        """Let waits end early once ``asked()`` is true (a signal): numbers unchanged."""

    def share(self, fn: Callable[[], Any]) -> Any:
        """Collective: fn() on the root, its result on every process."""

    def agree(self, flag: int) -> int:
        """Collective: the largest ``flag`` over the processes."""

    def barrier(self) -> None:
        """Collective: wait for every process."""

    def save(self, directory: Path) -> list[str]:
        """This process's token arrays into a checkpoint directory; their names."""

    @property
    def dim(self) -> int:
        """Elements of a token."""

    def close(self) -> None:
        """Release what the run held (persistent channels, the latency layer)."""

    def trace(self, tracer: Any) -> None:
        """Record this process's rounds (their parts as spans) in ``tracer`` (a
        :class:`mpi_teleport.trace.Tracer`), from the next :meth:`begin` on."""

    # -- the round boundary (elastic mode, mpi_teleport/DESIGN.md §11; the engine calls
    # them on every back end: a plain one keeps nothing, agrees on nothing, loses nothing)
    def keep(self, r: int) -> None:
        """Round r's start is an agreed boundary: keep what a recovery at r starts from
        (the tokens held, where they sit, who lives). Plain: nothing."""

    def enter(self, r: int) -> None:
        """Round r's start between two agreed boundaries (``agree_every``): nothing kept."""

    def settle(self, r: int, ok: bool = True, later: bool = False) -> bool:
        """Collective (elastic): True when no process failed since the last agreed
        boundary and this one's ``ok`` (no collective of round r raised
        :class:`~mpi_teleport.errors.RankLost`). Plain: ``ok`` (it is always true).
        ``later``: no collective comes before the next agreed boundary, so this
        agreement may be completed there (MPI: started now, waited for then; a loss it
        finds then goes back to the boundary before, the back end's ``rollback_to``)."""

    def recover(self, r: int) -> None:
        """After a failed :meth:`settle`: go on from round r's start (the last kept
        boundary) without the lost nodes, hot spares taking dead nodes over; raises
        RankLost (a loss during the recovery: the next agreement sees it) or
        errors.TooFewSurvivors. Never called on a plain back end (nothing fails)."""

    def join(self, r: int) -> None:
        """A hot spare that took a node over at round r: it holds nothing yet and enters
        the survivors' recovery of round r, which hands it the node's tokens. Only an
        elastic back end with spares is joined."""

    def set_handover(self, export: Callable[[], Any], take: Callable[[Any], None]) -> None:
        """What a recovery hands a spare that took a node over, beside the tokens: the
        engine's part, ``export()`` on the root and ``take(state)`` on the spare (the
        records, the checkpoint lineage). Plain: unused."""


@runtime_checkable
class RunRecorder(Protocol):
    """The root's records of one run: metrics.jsonl rows, the summary, and what logging
    rounds evaluate beyond the run's metric (Algorithm 2's validation)."""

    problem: Any
    spec: Any
    files: Any  # output.RunFiles
    progress: Any  # the root's progress.Progress bar (None: none)

    def pause(self) -> float:
        """Start of an interval excluded from ``time_s`` (logging, checkpoints)."""

    def resume(self, since: float) -> None:
        """End of the interval :meth:`pause` started."""

    def elapsed(self) -> float:
        """Seconds since the start, excluded intervals left out."""

    def validates(self, phase: int, r: int) -> bool:
        """Whether round r of ``phase`` also evaluates the validation metric."""

    def validates_tokens(self, phase: int, r: int) -> bool:
        """Whether round r of ``phase`` also validates each token alone."""

    def record(self, phase: int, r: int, mats: list[np.ndarray | None], time_s: float,
               extra: dict[str, Any], evaluated: Evaluations | None = None) -> bool:
        """Round r's record from the token matrices; True when the run should stop."""

    def record_training(self, r: int, x: np.ndarray, time_s: float, extra: dict[str, Any]) -> bool:
        """Round r's record without evaluation (``eval_every``): the training values in
        ``extra`` and the time; never stops the run."""

    def final_tokens(self) -> np.ndarray | None:
        """The token matrix the result's averaged model comes from."""

    def summary(self, wall: float, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Write and return summary.json's contents."""


@runtime_checkable
class CheckpointedRecorder(RunRecorder, Protocol):
    """A recorder whose state a checkpoint keeps (Algorithm 2 takes no checkpoints). An
    elastic run's recorder is one (elastic mode runs Teleportation or DSGD): every
    process keeps the records, so that any survivor can take over the files, and a
    record made before a loss is made again."""

    rounds_to_target: int | None  # the first round that reached the target (None: none yet)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of the records."""

    def restore(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state`."""

    def forget(self, r: int) -> None:
        """Elastic: round r is recorded again (after a loss at r): drop its records and
        later ones."""

    def follow(self, r: int, record: dict[str, Any], rounds_to_target: int | None) -> None:
        """Elastic, on the processes that do not write: keep the root's record of round r."""
