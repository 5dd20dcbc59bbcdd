"""Elastic mode: a run that goes on with the surviving nodes (mpi_teleport/DESIGN.md §11).

Pure definitions shared by the simulator (told of failures by a plan, ``--fail
NODE@ROUND``) and the MPI runtime (which detects them, :mod:`mpi_teleport.elastic.backend`),
so that both compute the same numbers:

* the **living set** L, the sorted ids of the nodes still in the run;
* the **schedule over L** (:func:`living_phase`): holders drawn among |L| indices by the
  ordinary schedule, index i mapped to L[i] (with L = every node: the schedule, bit for
  bit); DSGD's replicas are the survivors, its topology over |L|;
* the **loss** of nodes at round r (:func:`restore`): the state is that at the start of
  round r (before round r's record); a Teleportation token whose holder died is restored
  as the mean of the surviving tokens (summed in token order in float64, rounded once, as
  ``engine.average``), its momentum set to zero; a DSGD replica is dropped;
* **hot spares** (:func:`assign`): while a spare waits, a dead node is not lost but
  replaced: the lowest waiting spare becomes that node (same id, its data shard rebuilt),
  its tokens (a DSGD replica too) restored by the same rule, and the living set stays.

Nothing here talks MPI.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..core import schedule
from ..errors import CLI, Naming, TooFewSurvivors, UsageError
from ..core.schedule import Phase

RESTORE_SOURCE = "mean of the surviving tokens at the round's start; momentum zero"
_FAIL_RE = re.compile(r"^\s*(\d+)\s*@\s*(\d+)\s*$")


@dataclass(frozen=True)
class Failure:
    """Node ``node`` is lost at the start of round ``round`` (a failure plan's entry)."""

    node: int
    round: int


def parse_failures(texts, nodes: int | None = None, spares: int = 0,
                   naming: Naming = CLI) -> tuple[Failure, ...]:
    """``["NODE@ROUND", ...]`` (or one comma-separated string) -> failures sorted by round;
    UsageError naming the bad entry, spelt by ``naming`` (``--fail 9@2`` or
    ``fail='9@2'``). With ``spares``, ids nodes .. nodes + spares - 1 name the spares (a
    spare that dies while it waits)."""
    if texts is None:
        return ()
    if isinstance(texts, str):
        texts = [texts]
    out = []
    for text in texts:
        if isinstance(text, (tuple, list)) and len(text) == 2:
            text = f"{text[0]}@{text[1]}"
        for part in str(text).split(","):
            m = _FAIL_RE.match(part)
            if m is None:
                shown = f"{naming.name('fail')}{' ' if naming.cli else '='}{part!r}"
                raise UsageError(f"{shown}: expected NODE@ROUND, e.g. "
                                 f"{naming.given('fail', '3@20')} (node 3 lost at the start "
                                 f"of round 20)")
            node, r = int(m.group(1)), int(m.group(2))
            if nodes is not None and node >= nodes + spares:
                also = (f", spares {nodes}..{nodes + spares - 1}" if spares > 1 else
                        f", spare {nodes}" if spares else "")
                raise UsageError(f"{naming.given('fail', part.strip())}: node {node} does not "
                                 f"exist (n={nodes}{also})")
            out.append(Failure(node, r))
    if len({f.node for f in out}) != len(out):
        raise UsageError(f"{naming.name('fail')}: a node can be lost only once")
    return tuple(sorted(out, key=lambda f: (f.round, f.node)))


@dataclass
class Living:
    """The living set and what was lost: ``losses`` as recorded ({"node", "round",
    "tokens": the restored tokens}), ``replaced`` the nodes a spare took over ({"node",
    "round", "spare", "tokens"})."""

    nodes: tuple[int, ...]
    losses: list = field(default_factory=list)
    replaced: list = field(default_factory=list)

    @classmethod
    def everyone(cls, n: int) -> "Living":
        return cls(tuple(range(n)))

    @classmethod
    def from_losses(cls, n: int, losses, replaced=()) -> "Living":
        dead = {int(loss["node"]) for loss in losses or ()}
        return cls(tuple(i for i in range(n) if i not in dead), [dict(x) for x in losses or ()],
                   [dict(x) for x in replaced or ()])

    @classmethod
    def from_manifest(cls, n: int, manifest: dict | None) -> "Living":
        """The living set a resumed run continues with: the lost nodes stay out, except
        after a too-few-survivors checkpoint (the job was requeued to get nodes back:
        every node is in again; the losses stay in the records)."""
        losses = (manifest or {}).get("lost") or []
        replaced = (manifest or {}).get("replaced") or []
        if (manifest or {}).get("reason") == "too-few-survivors":
            return cls(tuple(range(n)), [dict(x) for x in losses], [dict(x) for x in replaced])
        return cls.from_losses(n, losses, replaced)

    def without(self, dead) -> "Living":
        dead = set(dead)
        return Living(tuple(i for i in self.nodes if i not in dead), list(self.losses),
                      list(self.replaced))

    def record(self) -> list[list[int]]:
        """[[node, round], ...]: what a metrics.jsonl record carries after a loss."""
        return [[int(x["node"]), int(x["round"])] for x in self.losses]

    def record_replaced(self) -> list[list[int]]:
        """[[node, round, spare], ...]: what a metrics.jsonl record carries after a spare
        took a node over."""
        return [[int(x["node"]), int(x["round"]), int(x["spare"])] for x in self.replaced]


# ------------------------------------------------------------------------------- hot spares
def spare_ids(nodes: int, spares: int) -> tuple[int, ...]:
    """The spares' ids: the ranks after the nodes' (n .. n + S - 1), as in the MPI job."""
    return tuple(range(nodes, nodes + spares))


def assign(dead, waiting) -> tuple[dict[int, int], list[int]]:
    """Which dead nodes the waiting spares take over: the lowest dead node gets the lowest
    spare, and so on while spares are left. Returns ({node: spare}, the nodes lost)."""
    dead, waiting = sorted(int(i) for i in dead), sorted(int(s) for s in waiting)
    replaced = dict(zip(dead, waiting))
    return replaced, [i for i in dead if i not in replaced]


def replacement_records(spec, r: int, entry: np.ndarray, replaced: dict) -> list[dict]:
    """What the records keep of a spare taking node i over at round r: per node, the spare,
    the tokens the node held (a DSGD replica too), restored as the mean of the survivors'."""
    out = []
    for i in sorted(replaced):
        tokens = lost_tokens(entry, [i])
        out.append({"node": int(i), "round": int(r), "spare": int(replaced[i]),
                    "tokens": tokens, "restored": RESTORE_SOURCE if tokens else None})
    return out


def living_holders_block(seed: int, living: np.ndarray, k: int, t0: int, count: int) -> np.ndarray:
    """(count, k): the schedule over |L| nodes, index i mapped to node living[i]."""
    return living[schedule.holders_block(seed, len(living), k, t0, count)]


def living_phase(spec, living: tuple[int, ...], start: int, placed: bool) -> Phase:
    """The rest of ``spec``'s (one) phase from round ``start`` over the living nodes.
    ``placed``: the tokens sit with holders(start) on entry (after a loss the survivors
    re-place them there, so Algorithm 1's round ``start`` is a placement round)."""
    stop = spec.rounds
    nodes = np.asarray(living, dtype=np.int64)
    if spec.algorithm == "dsgd":
        fixed = [nodes]
        return Phase(lambda t: fixed, start, stop, fresh=placed,
                     block=lambda t0, t1: np.broadcast_to(nodes, (t1 - t0, len(nodes))))
    if spec.algorithm != "teleportation":
        raise ValueError("elastic mode runs Teleportation or DSGD")
    k, seed = spec.k, spec.seed
    if len(nodes) == spec.nodes:  # everyone alive: the ordinary schedule (no index map)
        base = spec.phases()[0]
        return Phase(base.roster, start, stop, fresh=placed, block=base.block)
    return Phase(lambda t: [living_holders_block(seed, nodes, k, t, 1)[0]], start, stop,
                 fresh=placed, block=lambda t0, t1: living_holders_block(seed, nodes, k, t0, t1 - t0))


def token_count(spec, living: tuple[int, ...]) -> int:
    """Tokens of the run over ``living``: k for Teleportation, |L| for DSGD."""
    return len(living) if spec.algorithm == "dsgd" else spec.k


def check_enough(spec, r: int, living: tuple[int, ...]) -> None:
    """TooFewSurvivors when the living nodes cannot hold every token (DSGD: none left)."""
    need = 1 if spec.algorithm == "dsgd" else spec.k
    if len(living) < need:
        raise TooFewSurvivors(r, len(living), need)


def entry_roster(phase: Phase, r: int, moves: str) -> np.ndarray:
    """Where the tokens sit at the start of round r (one run): holders(r) under Alg. 3 and
    DSGD, holders(r - 1) under Alg. 1 (holders(r) at a placement round)."""
    if moves == "overlap" or phase.is_placement_round(r):
        return np.asarray(phase.roster(r)[0])
    return np.asarray(phase.roster(r - 1)[0])


def lost_tokens(entry: np.ndarray, dead) -> list[int]:
    """The tokens whose holder on entry (``entry``[m]: the node token m sits with) died."""
    dead = set(int(i) for i in dead)
    return [m for m, node in enumerate(entry.tolist()) if node in dead]


def loss_records(spec, r: int, entry: np.ndarray, dead) -> list[dict]:
    """What the records keep of losing ``dead`` at round r: per node, the tokens it held
    (restored under Teleportation, dropped under DSGD) and how."""
    how = "dropped" if spec.algorithm == "dsgd" else RESTORE_SOURCE
    return [{"node": int(i), "round": int(r), "tokens": lost_tokens(entry, [i]),
             "restored": how if lost_tokens(entry, [i]) else None} for i in sorted(dead)]


def mean_of(rows: np.ndarray) -> np.ndarray:
    """Mean of the rows, summed in row (token) order in float64, rounded once (as
    engine.average)."""
    return (np.add.reduce(rows.astype(np.float64), axis=0) / len(rows)).astype(rows.dtype)


def restore(spec, x: np.ndarray, v: np.ndarray | None, entry: np.ndarray, dead, replaced=()):
    """The token matrices after ``dead`` died at a round's start: ``x``, ``v`` (rows in
    token order, sitting with ``entry``); ``replaced``: the dead nodes a spare takes over.
    Teleportation: every dead holder's row becomes the mean of the surviving rows (zero
    momentum); DSGD: a replaced node's replica too, a lost node's replica is dropped.
    Returns (x, v, the restored or dropped tokens)."""
    lost = lost_tokens(entry, dead)
    if not lost:
        return x, v, lost
    keep = [m for m in range(len(x)) if m not in set(lost)]
    refill = lost if spec.algorithm != "dsgd" else lost_tokens(entry, replaced)
    if refill and not keep:  # every holder died at once: no token left to restore from
        raise TooFewSurvivors(-1, 0, spec.k, all_lost=True)
    if refill:
        x = x.copy()
        x[refill] = mean_of(x[keep])
        if v is not None:
            v = v.copy()
            v[refill] = 0
    if spec.algorithm == "dsgd":  # the lost replicas are dropped (the replaced ones stay)
        rows = [m for m in range(len(x)) if m in set(keep) or m in set(refill)]
        return x[rows].copy(), None if v is None else v[rows].copy(), lost
    return x, v, lost
