"""The Concepts pages' figures, drawn from the package's own schedule, topologies and runs.

The manual's build runs this (docs/_ext/commands.py, at ``builder-inited``), so a figure
cannot drift from the code: the active nodes and the tokens' hand-over come from
``mpi_teleport.core.schedule.holders``, the gossip edges from
``mpi_teleport.core.topology.mixing``, the living set after a loss from
``mpi_teleport.elastic.survivors.living_holders_block``, and the curves of "why k matters"
from a run of the simulator (``mpi_teleport.teleportation`` and ``mpi_teleport.dsgd``, a
few seconds). Alone:

    .venv/bin/python docs/concepts/figures.py [OUT_DIR]

writes the PNGs into OUT_DIR (default: docs/concepts/_figures, git-ignored).
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

import numpy as np  # noqa: E402

from mpi_teleport.core import schedule, topology  # noqa: E402

SEED = 0
ACTIVE, NEXT, IDLE, DEAD, SPARE = "#1a1a1a", "#2b6cb0", "#ffffff", "#c53030", "#2f855a"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _circle(count: int, radius: float = 1.0) -> np.ndarray:
    """Positions of ``count`` points on a circle, the first at the top, clockwise."""
    a = np.pi / 2 - 2 * np.pi * np.arange(count) / count
    return radius * np.stack([np.cos(a), np.sin(a)], axis=1)


def _edges(name, k: int, t: int) -> list[tuple[int, int]]:
    """(sender token, receiver token) pairs of W(t), self-loops left out."""
    w = topology.mixing(name, k, t)
    out = []
    for j in range(k):
        sources, weights = w.row(j)
        out += [(int(m), j) for m, weight in zip(sources, weights) if m != j and weight > 0]
    return out


def _nodes(ax, pos, fill: dict[int, str], labels: dict[int, str], names: bool = True) -> None:
    for i, (x, y) in enumerate(pos):
        colour = fill.get(i, IDLE)
        ax.add_patch(_patch(x, y, colour))
        if i in labels:
            ax.text(x, y, labels[i], ha="center", va="center", color="white", fontsize=10,
                    fontweight="bold", zorder=4)
        if names:  # beside the node, away from the centre
            side = "left" if x > 0.3 else "right" if x < -0.3 else "center"
            dx = 0.17 if x > 0.3 else -0.17 if x < -0.3 else 0.0
            dy = 0.0 if side != "center" else (0.22 if y > 0 else -0.22)
            ax.text(x + dx, y + dy, f"node {i}", ha=side, va="center", fontsize=7,
                    color="#4a5568")


def _patch(x, y, colour):
    from matplotlib.patches import Circle

    return Circle((x, y), 0.13, facecolor=colour, edgecolor="#1a1a1a", lw=1.2, zorder=3)


def _arrow(ax, a, b, colour, both=False, rad=0.0, lw=1.4, style="-|>") -> None:
    from matplotlib.patches import FancyArrowPatch

    ax.add_patch(FancyArrowPatch(tuple(a), tuple(b), arrowstyle=("<|-|>" if both else style),
                                 mutation_scale=10, color=colour, lw=lw, shrinkA=11, shrinkB=11,
                                 connectionstyle=f"arc3,rad={rad}", zorder=2))


def _frame(ax, title: str, width: float = 1.45) -> None:
    ax.set_xlim(-width, width)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=9)


def rounds(out: Path, n: int = 8, k: int = 3, count: int = 3, name: str = "ring") -> Path:
    """The paper's Figure 1 from the package's schedule: n nodes, k tokens, ``count``
    rounds; each round's gossip among its active nodes, and each hand-over between."""
    plt = _plt()
    pos = _circle(n)
    held = [schedule.holders(SEED, n, k, t) for t in range(count)]
    fig, axes = plt.subplots(1, 2 * count - 1, figsize=(3.0 * (2 * count - 1), 3.3))
    for t in range(count):
        ax = axes[2 * t]
        holder = held[t]
        _nodes(ax, pos, {int(i): ACTIVE for i in holder}, {int(i): str(m) for m, i in enumerate(holder)})
        for m, j in _edges(name, k, t):
            if m < j or (j, m) not in _edges(name, k, t):
                _arrow(ax, pos[holder[m]], pos[holder[j]], "#718096",
                       both=(j, m) in _edges(name, k, t), rad=0.15)
        _frame(ax, f"round {t}: SGD step, then gossip\n({name} over the {k} tokens)", 1.8)
        if t + 1 < count:
            ax = axes[2 * t + 1]
            nxt = held[t + 1]
            fill = {int(i): ACTIVE for i in holder}
            fill.update({int(i): NEXT for i in nxt})
            _nodes(ax, pos, fill, {int(i): str(m) for m, i in enumerate(nxt)})
            for m in range(k):
                if holder[m] != nxt[m]:
                    _arrow(ax, pos[holder[m]], pos[nxt[m]], NEXT, rad=0.2)
            _frame(ax, f"hand-over, round {t} -> {t + 1}:\neach token to its next holder", 1.8)
    fig.text(0.5, 0.02, f"n = {n} nodes, k = {k} active; a number is the token a node holds "
                        f"(black: active this round, blue: the next round's holders; seed {SEED})",
             ha="center", fontsize=8)
    return _save(fig, out / "rounds.png")


def topologies(out: Path, k: int = 8, most: int = 3) -> Path:
    """Each built-in topology over k tokens, one panel per round of its period (at most
    ``most``); arrows point from sender to receiver, lines are both ways."""
    plt = _plt()
    names = topology.TOPOLOGIES
    fig, axes = plt.subplots(len(names), most, figsize=(2.3 * most, 2.3 * len(names)))
    pos = _circle(k)
    for row, name in enumerate(names):
        period = topology.period(name, k)
        for t in range(most):
            ax = axes[row, t]
            if t >= period:
                ax.axis("off")
                if t == period and period == 1:
                    ax.text(0.0, 0.5, "the same\nevery round", transform=ax.transAxes, fontsize=8,
                            color="#4a5568", va="center")
                continue
            edges = _edges(name, k, t)
            _nodes(ax, pos, {i: ACTIVE for i in range(k)}, {i: str(i) for i in range(k)}, names=False)
            for m, j in edges:
                both = (j, m) in edges
                if both and m > j:
                    continue
                _arrow(ax, pos[m], pos[j], "#718096", both=both, rad=0.0 if both else 0.12,
                       lw=1.0, style="-" if both else "-|>")
            gap = topology.spectral_gap(name, k)
            suffix = f", gap {gap:.2f}" if gap is not None and t == 0 else ""
            round_text = f" round {t}" if period > 1 else ""
            _frame(ax, f"{name}{round_text}{suffix}")
    fig.suptitle(f"The topologies over k = {k} tokens", fontsize=11)
    fig.tight_layout()
    return _save(fig, out / "topologies.png")


def k_matters(out: Path, n: int = 100, rounds: int = 600, warm_up: int = 300) -> Path:
    """A real run: the paper's synthetic problem on n nodes (ring, heterogeneous data),
    Teleportation's error for each k against Decentralized SGD's, averaged over the
    rounds after ``warm_up`` (where each has settled)."""
    import mpi_teleport as mt
    from mpi_teleport.problems.quadratic import Quadratic

    plt = _plt()
    problem = dict(n=n, d=10, sigma2=10.0, zeta2=100.0)
    common = dict(nodes=n, rounds=rounds, lr=0.01, topology="ring", log_every=10, seed=SEED)

    def settled(records) -> float:
        return float(np.mean([r["error"] for r in records if r["round"] >= warm_up]))

    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k < n] + [n]
    errors = [settled(mt.teleportation(Quadratic(**problem), k=k, **common).records) for k in ks]
    dsgd = settled(mt.dsgd(Quadratic(**problem), **common).records)
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.loglog(ks, errors, "o-", color="#2b6cb0", label="Teleportation, k active of n")
    ax.axhline(dsgd, color="#1a1a1a", ls="--", label=f"Decentralized SGD, all {n} nodes")
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.set_xlabel("k (active nodes)")
    ax.set_ylabel(f"error, mean over rounds {warm_up}-{rounds}")
    ax.set_title(f"n = {n}, ring, sigma2 = {problem['sigma2']:g}, zeta2 = {problem['zeta2']:g}, "
                 f"lr = {common['lr']} (python -m mpi_teleport.sim)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return _save(fig, out / "k-matters.png")


def elastic(out: Path, n: int = 8, k: int = 3, count: int = 6, lost_node: int | None = None,
            at: int = 3) -> Path:
    """Who holds a token in each round (a row per node, a column per round) when a node
    dies at round ``at``: elastic mode draws the next holders from the survivors; with a
    hot spare, the spare becomes the dead node and the schedule does not change."""
    from mpi_teleport.elastic.survivors import living_holders_block

    plt = _plt()
    plain = schedule.holders_block(SEED, n, k, 0, count)
    if lost_node is None:  # a node that holds a token at the loss: the case that matters
        lost_node = int(plain[at][0])
    living = np.array([i for i in range(n) if i != lost_node], dtype=np.int64)
    after = living_holders_block(SEED, living, k, at, count - at)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9))
    for ax, spare in ((axes[0], False), (axes[1], True)):
        rows = n + (1 if spare else 0)
        for t in range(count):
            holder = plain[t] if (spare or t < at) else after[t - at]
            for node in range(rows):
                y = rows - 1 - node
                dead = node == lost_node and t >= at
                is_spare = node == n
                who = node
                if spare and t >= at and is_spare:
                    who = lost_node  # the spare runs as the dead node
                if spare and dead:
                    colour, label = DEAD, "x"
                elif dead:
                    colour, label = DEAD, "x"
                elif who in holder and (not is_spare or t >= at):
                    m = int(np.flatnonzero(holder == who)[0])
                    colour, label = (SPARE if is_spare else ACTIVE), str(m)
                else:
                    colour, label = (("#e6fffa" if is_spare else IDLE), "")
                ax.add_patch(_square(t, y, colour))
                if label:
                    ax.text(t, y, label, ha="center", va="center", fontsize=9,
                            color="white", fontweight="bold")
        ax.set_xlim(-0.6, count - 0.4)
        ax.set_ylim(-0.6, rows - 0.4)
        ax.set_xticks(range(count))
        ax.set_xlabel("round")
        ax.set_yticks(range(rows))
        ax.set_yticklabels([("spare (id %d)" % n if i == n else f"node {i}")
                            for i in range(rows)][::-1], fontsize=8)
        ax.axvline(at - 0.5, color=DEAD, lw=1, ls=":")
        ax.set_title((f"--spares 1: the spare becomes node {lost_node} at round {at};\n"
                      "the schedule does not change") if spare else
                     (f"--elastic: node {lost_node} dies at round {at};\n"
                      f"the holders are drawn from the {n - 1} survivors"), fontsize=9)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.text(0.5, 0.01, "a number is the token a node holds that round; x: the dead node; "
                        "its tokens restart from the mean of the surviving tokens",
             ha="center", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return _save(fig, out / "elastic.png")


def _square(x, y, colour):
    from matplotlib.patches import Rectangle

    return Rectangle((x - 0.4, y - 0.4), 0.8, 0.8, facecolor=colour, edgecolor="#a0aec0", lw=0.8)


def _save(fig, path: Path) -> Path:
    """Write atomically: two builds of the manual at once never read half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".png", dir=path.parent)
    os.close(fd)
    fig.savefig(tmp, dpi=110)
    _plt().close(fig)
    os.replace(tmp, path)
    return path


FIGURES = (rounds, topologies, k_matters, elastic)


def draw_all(out: Path) -> list[Path]:
    return [draw(out) for draw in FIGURES]


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "_figures"
    for written in draw_all(target):
        print(written)
