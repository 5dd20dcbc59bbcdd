"""Paper Sec. 5.1 / Figure 2 / Table 1: rounds to error 1e-3, DSGD vs Teleportation (Alg. 2 k).

    python benchmarks/bench_synthetic.py [--cap 100000] [--search-rounds 1000] [--quick]
                                         [--all-lrs] [--seed 0] [--out benchmarks/results]

Setting (paper Sec. 5.1): n = 100 nodes, d = 50, f_i(x) = 1/2 ||(i/sqrt n)(x - b_i)||^2,
sigma2 and zeta2 in {0, 10, 100}, topologies ring and base2 -> 18 settings; target error
1e-3 (error = mean over tokens/replicas of ||x_m - x*||^2, the package's ``evaluate``).
Step-size grid (paper appendix): {0.1, 0.075, 0.05, 0.025, 0.01, 0.0075, 0.005, 0.0025,
0.001, 0.00075, 0.0005, 0.00025, 0.0001}. Seed 0 for every run (problem, x0, noise,
schedule), exactly what ``python -m mpi_teleport.sim --seed 0`` uses.

Protocol, per setting:

1. Decentralized SGD: every lr of the grid runs (k = n, fixed placement) for at most
   ``--cap`` rounds (default 10^5; the committed results used --cap 20000 to fit a shared 2-core machine). Rounds-to-target of an lr = first round r with error <= 1e-3 (error
   checked after every round). DSGD's result = the lr with the fewest rounds.
2. Teleportation: for every lr, Algorithm 2 (``mpi_teleport.runtime.search``) picks k: phase 1
   runs k = n for T = ``--search-rounds`` rounds, phase 2 runs all candidates
   k in {1, 2, 4, 8, 16, 32} concurrently on disjoint nodes for T rounds; the candidate
   (incl. k = n) with the smallest averaged-model error ||mean_m x_m - x*||^2 wins (ties to
   the smaller k). The same search also gives the choice under the other ``--k-select``
   criteria (``tokens``: the mean over tokens of ||x_m - x*||^2 at the end; ``time-average``:
   the averaged-model error averaged over the T rounds of the candidate's phase, as with
   ``--log-every 1``), and for each criterion step 2 and 3 are repeated with its k per lr
   (the ``k (...)`` columns of the second table, the ``*_k``/``*_rounds`` CSV columns); the
   headline table keeps ``averaged``. Then Teleportation with that k and that lr runs from round 0 (fresh
   x0, ``schedule.holders``) for at most ``--cap`` rounds; Teleportation's result = the lr
   with the fewest rounds. The 2T search rounds are *not* counted in rounds-to-target
   (they are the same for every setting: 2T per lr; Figure 2 of the paper plots the run
   with the selected k as well).
3. The best lr of a method is the one with the fewest rounds; ties -> lower error at that
   round. If no lr reaches the target within the cap, the result is reported as
   ``> cap`` (never dropped) and the "best" lr is the one with the lowest error at the cap;
   a speed-up involving a ``> cap`` run is a bound (``>x`` or ``<x``).
4. An lr whose error becomes non-finite or exceeds 1e8 is "diverged" and dropped from its
   batch (for Alg. 2: a diverged candidate gets validation +inf and is never chosen;
   ``simulate_search`` would instead abort that lr with NonFiniteError; if every
   candidate diverges the lr is not used for Teleportation).

Speed: the simulator's arithmetic is replicated on a stacked array of shape (k, L, d)
holding the tokens of all L step sizes of one (method, setting, k). Gradient noise, b_i
and the schedule depend only on (seed, node, round), not on the step size, so they are
drawn once per round and broadcast; mixing is linear, so ``algorithms.mix`` is applied once to
the (k, L*d) view. Every operation is the same element-wise float64 operation as in
``sim.simulate`` / ``search.simulate_search``, so each lr slice is bit-identical to a
separate ``simulate()`` run. This is *checked* on every invocation (``--quick`` too), see
``verify()``: DSGD (ring), Teleportation (k = 4 ring, k = 8 base2) error trajectories
must be equal (==) to ``simulate(..., log_every=1)`` records for two lrs, and Algorithm 2's
candidate validation errors must match ``simulate(k="auto")``'s to 1e-12 relative with
the same chosen k. (The fast path sums the error with numpy instead of math.fsum: it can
differ in the last ulp, which only matters for an error within ~1e-16 of the target.)
By default a batch stops as soon as its first lr reaches the target (later lrs cannot do
better; they are reported as ``>R`` in the per-lr CSV), and Teleportation's k-groups use
the best round so far as their horizon. ``--all-lrs`` instead runs every lr to its own
target or the cap (slower; gives the full per-lr table).

Outputs (prefix ``bench_synthetic``, ``bench_synthetic_quick`` with --quick) in --out:
``.csv`` (one row per setting), ``_lrs.csv`` (one row per setting x method x lr),
``.md`` (the table), ``.png`` (error vs round, log-log, best lr of each method, one panel
per setting), ``.json`` (everything above plus verification, runtimes and curves).
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mpi_teleport.measure import rng, schedule  # noqa: E402
from mpi_teleport.measure import topology as topo  # noqa: E402
from mpi_teleport.measure import resolve  # noqa: E402
from mpi_teleport.measure import RunFiles  # noqa: E402
from mpi_teleport.measure import Quadratic  # noqa: E402
from mpi_teleport.measure import CRITERIA  # noqa: E402
from mpi_teleport.measure import mix  # noqa: E402
from mpi_teleport.measure import simulate  # noqa: E402

N, D, TARGET = 100, 50, 1e-3
LRS = (0.1, 0.075, 0.05, 0.025, 0.01, 0.0075, 0.005, 0.0025, 0.001, 0.00075, 0.0005,
       0.00025, 0.0001)
NOISES = (0.0, 10.0, 100.0)
HETEROS = (0.0, 10.0, 100.0)
TOPOLOGIES = ("ring", "base2")
DIVERGED = 1e8
PAPER_K = {  # Table 1 of the paper: (sigma2, zeta2) -> (ring, base2)
    (0, 0): (1, 1), (0, 10): (1, 1), (0, 100): (4, 4),
    (10, 0): (1, 1), (10, 10): (1, 1), (10, 100): (8, 8),
    (100, 0): (8, 8), (100, 10): (8, 8), (100, 100): (4, 16),
}


# ---------------------------------------------------------------- batched simulator
def fast_mix(w: topo.Mixing, y: np.ndarray) -> np.ndarray:
    """``algorithms.mix`` with the same per-element operations in the same order (bit-identical:
    slot by slot, x_rows (+)= weight * y_source), using np.take into a buffer for slots
    that cover every row instead of fancy-index read-modify-write."""
    if w.complete:
        return mix(w, y)
    x, buf = None, np.empty_like(y)
    for rows, sources, weights in w.slots():
        if len(rows) == w.k:
            np.take(y, sources, axis=0, out=buf)
            buf *= weights
            if x is None:
                x, buf = buf, np.empty_like(y)
            else:
                x += buf
        else:
            x[rows] += weights * y[sources]
    return x


class Batched:
    """The simulator's round arithmetic on a (k, L, d) stack of L step sizes."""

    def __init__(self, problem: Quadratic, topology: str):
        self.p, self.topology = problem, topology
        every = np.arange(problem.n, dtype=np.int64)
        self.b = problem.b(every)  # (n, d), the same table Quadratic.gradient reads
        self.curv = problem.curvature(every)  # (n, 1)
        self.x0 = problem.initial()
        self.x_star = problem.x_star()
        self.noise = math.sqrt(problem.sigma2 / problem.d) if problem.sigma2 > 0 else 0.0

    def start(self, k: int, L: int) -> np.ndarray:
        return np.broadcast_to(self.x0, (k, L, self.p.d)).copy()

    def advance(self, x: np.ndarray, lr_col: np.ndarray, nodes: np.ndarray, t: int) -> np.ndarray:
        """local_step (Quadratic.gradient, y = x - lr g) then mix(W(t)), per lr slice."""
        k, L, d = x.shape
        g = np.subtract(x, self.b[nodes][:, None, :])
        g *= self.curv[nodes][:, :, None]
        if self.noise:
            eps = rng.normals(rng.key(self.p.seed, rng.STREAM_NOISE, t), nodes, d)
            eps *= self.noise
            g += eps[:, None, :]
        g *= lr_col
        y = np.subtract(x, g, out=g)
        return fast_mix(topo.mixing(self.topology, k, t), y.reshape(k, L * d)).reshape(k, L, d)

    def errors(self, x: np.ndarray) -> np.ndarray:
        """error = mean_m ||x_m - x*||^2 per lr slice (numpy sum; evaluate() uses fsum)."""
        diff = x - self.x_star
        return np.sum(diff * diff, axis=2).sum(axis=0) / x.shape[0]

    def exact_errors(self, x: np.ndarray) -> np.ndarray:
        return np.array([self.p.evaluate(x[:, j, :])["error"] for j in range(x.shape[1])])

    def validate(self, x: np.ndarray) -> np.ndarray:
        """Alg. 2 metric ||mean_m x_m - x*||^2 per lr slice (non-finite -> +inf)."""
        diff = np.add.reduce(x, axis=0) / x.shape[0] - self.x_star
        v = np.sum(diff * diff, axis=1)
        return np.where(np.isfinite(v), v, np.inf)


def run_batch(bs: Batched, lrs, k: int, placement, horizon: int, stop_first: bool,
              exact: bool = False, drop: bool = True) -> dict:
    """Advance all lrs (k tokens) from x0 for at most ``horizon`` rounds.

    Returns per lr: ``reached`` (round or None), ``rounds`` run, ``final`` error,
    ``diverged`` and the per-round error ``curve`` (NaN after the lr stopped)."""
    L = len(lrs)
    lr_col = np.asarray(lrs, dtype=np.float64)[None, :, None]
    x = bs.start(k, L)
    active = np.arange(L)
    curves = np.full((horizon + 1, L), np.nan)
    reached = [None] * L
    rounds = [0] * L
    final = [math.nan] * L
    diverged = [False] * L
    exact_curves = np.full((horizon + 1, L), np.nan) if exact else None

    def record(r, e):
        nonlocal x, active, lr_col
        curves[r, active] = e
        if exact:
            exact_curves[r, active] = bs.exact_errors(x)
        bad = ~np.isfinite(e) | (e > DIVERGED)
        hit = (e <= TARGET) & ~bad
        for j, a in enumerate(active):
            rounds[a], final[a] = r, float(e[j])
            if hit[j]:
                reached[a] = r
            diverged[a] = bool(bad[j])
        if stop_first and hit.any():
            return True
        keep = ~(hit | bad)
        if drop and not keep.all():
            x, active, lr_col = x[:, keep], active[keep], lr_col[:, keep]
        return drop and active.size == 0

    with np.errstate(over="ignore", invalid="ignore"):
        done = record(0, bs.errors(x))
        for t in range(horizon):
            if done:
                break
            x = bs.advance(x, lr_col, placement(t), t)
            done = record(t + 1, bs.errors(x))
    out = {"reached": reached, "rounds": rounds, "final": final, "diverged": diverged,
           "curves": curves}
    if exact:
        out["exact_curves"] = exact_curves
    return out


def search_k(bs: Batched, lrs, T: int, seed: int) -> dict:
    """Algorithm 2 for all lrs at once, under every criterion of ``mpi_teleport.runtime.search``
    (as ``--k-select`` with ``--log-every 1``): ``by_criterion[c]`` = {k: value (L,)},
    ``chosen_by[c]`` = the chosen k per lr; ``candidates``/``chosen`` = 'averaged'.

    averaged: ||mean_m x_m - x*||^2 after the candidate's T rounds; tokens: the mean over
    its tokens of ||x_m - x*||^2 then; time-average: the mean of the averaged-model error
    over the T rounds of its phase after each step (rounds 1..T of the phase)."""
    n, L = bs.p.n, len(lrs)
    lr_col = np.asarray(lrs, dtype=np.float64)[None, :, None]
    by = {c: {} for c in CRITERIA}

    def finish(k, x, total):
        by["averaged"][k] = bs.validate(x)
        tok = bs.errors(x)
        by["tokens"][k] = np.where(np.isfinite(tok), tok, np.inf)
        by["time-average"][k] = np.where(np.isfinite(total), total / T, np.inf)

    with np.errstate(over="ignore", invalid="ignore"):
        x, total = bs.start(n, L), np.zeros(L)
        for t in range(T):
            x = bs.advance(x, lr_col, schedule.holders(seed, n, n, t), t)
            total += bs.validate(x)
        finish(n, x, total)
        ks = schedule.candidate_ks(n)
        xs = [bs.start(k, L) for k in ks]
        totals = [np.zeros(L) for _ in ks]
        for t in range(T, 2 * T):
            blocks = schedule.search_blocks(seed, n, t)
            xs = [bs.advance(xq, lr_col, hq, t) for xq, hq in zip(xs, blocks)]
            for q, xq in enumerate(xs):
                totals[q] += bs.validate(xq)
        for k, xq, tq in zip(ks, xs, totals):
            finish(k, xq, tq)
    chosen_by = {}
    for c in CRITERIA:
        chosen_by[c] = []
        for j in range(L):
            finite = [(by[c][k][j], k) for k in by[c] if np.isfinite(by[c][k][j])]
            chosen_by[c].append(min(finite)[1] if finite else None)
    by = {c: {k: v[k] for k in sorted(v)} for c, v in by.items()}
    return {"candidates": by["averaged"], "chosen": chosen_by["averaged"],
            "by_criterion": by, "chosen_by": chosen_by}


# ---------------------------------------------------------------- one setting
def fmt_rounds(res: dict) -> str:
    return str(res["rounds"]) if res["reached"] else f"> {res['rounds']}"


def best_of(lrs, ks, batch: dict, idx) -> dict:
    """Best lr among indices idx of a batch result (fewest rounds, then lowest error)."""
    hit = [j for j in idx if batch["reached"][j] is not None]
    if hit:
        j = min(hit, key=lambda j: (batch["reached"][j], batch["final"][j]))
    else:
        ok = [j for j in idx if not batch["diverged"][j]] or list(idx)
        j = min(ok, key=lambda j: (batch["final"][j] if math.isfinite(batch["final"][j]) else math.inf))
    return {"lr": lrs[j], "k": ks[j], "reached": batch["reached"][j] is not None,
            "rounds": batch["reached"][j] if batch["reached"][j] is not None else batch["rounds"][j],
            "final": batch["final"][j], "j": j}


def teleport(bs: Batched, lrs, chosen, cap: int, seed: int, all_lrs: bool):
    """Teleportation with each lr's chosen k (None: the search diverged), grouped by k.
    Returns the best lr's result (None if no lr could run) and per lr (reached, rounds,
    final, diverged) or None."""
    groups: dict[int, list[int]] = {}
    for j, k in enumerate(chosen):
        if k is not None:
            groups.setdefault(k, []).append(j)
    best, horizon = None, cap
    tele_rows = {j: None for j in range(len(lrs))}
    for k in sorted(groups, key=lambda k: -max(lrs[j] for j in groups[k])):
        idx = groups[k]
        glrs = [lrs[j] for j in idx]
        res = run_batch(bs, glrs, k, lambda t, k=k: schedule.holders(seed, N, k, t),
                        horizon, stop_first=not all_lrs)
        b = best_of(glrs, [k] * len(glrs), res, range(len(glrs)))
        b["curve"] = res["curves"][:b["rounds"] + 1, b["j"]]
        for i, j in enumerate(idx):
            tele_rows[j] = (res["reached"][i], res["rounds"][i], res["final"][i], res["diverged"][i])
        better = best is None or (b["reached"] and not best["reached"]) or (
            b["reached"] == best["reached"] and (
                (b["rounds"], b["final"]) < (best["rounds"], best["final"]) if b["reached"]
                else b["final"] < best["final"]))
        if better:
            best = b
        if best["reached"] and not all_lrs:
            horizon = min(horizon, best["rounds"])
    return best, tele_rows


def run_setting(sigma2, zeta2, topology, lrs, cap, T, seed, all_lrs) -> dict:
    problem = Quadratic(N, D, sigma2, zeta2, seed)
    bs = Batched(problem, topology)
    rows, t0 = [], time.perf_counter()

    # Decentralized SGD: k = n, node m holds replica m forever.
    fixed = schedule.fixed_holders(N)
    dsgd = run_batch(bs, lrs, N, lambda t: fixed, cap, stop_first=not all_lrs)
    d_best = best_of(lrs, [N] * len(lrs), dsgd, range(len(lrs)))
    d_curve = dsgd["curves"][:d_best["rounds"] + 1, d_best["j"]]
    for j, lr in enumerate(lrs):
        rows.append({"method": "dsgd", "lr": lr, "k": N, "search_k": "",
                     "rounds_to_target": dsgd["reached"][j] if dsgd["reached"][j] is not None
                     else ("diverged" if dsgd["diverged"][j] else f">{dsgd['rounds'][j]}"),
                     "error_at_stop": dsgd["final"][j]})
    t_dsgd = time.perf_counter() - t0

    # Teleportation: Alg. 2 per lr (every criterion at once), then for each criterion
    # the chosen k per lr, grouped by k (criteria that choose alike share the runs).
    t1 = time.perf_counter()
    search = search_k(bs, lrs, T, seed)
    t_search = time.perf_counter() - t1
    stages: dict[tuple, tuple] = {}
    for c in CRITERIA:
        key = tuple(search["chosen_by"][c])
        if key not in stages:
            stages[key] = teleport(bs, lrs, search["chosen_by"][c], cap, seed, all_lrs)
    best, tele_rows = stages[tuple(search["chosen"])]
    tele_by = {c: stages[tuple(search["chosen_by"][c])][0] for c in CRITERIA}
    t_tele = time.perf_counter() - t1
    for j, lr in enumerate(lrs):
        tr = tele_rows[j]
        if tr is None:
            rtt = "search diverged"
        elif tr[0] is not None:
            rtt = tr[0]
        else:
            rtt = "diverged" if tr[3] else f">{tr[1]}"
        rows.append({"method": "teleportation", "lr": lr, "k": search["chosen"][j] or "",
                     "search_k": json.dumps({str(k): float(v[j]) for k, v in search["candidates"].items()}),
                     "k_by_criterion": json.dumps({c: search["chosen_by"][c][j] for c in CRITERIA}),
                     "candidates_by_criterion": json.dumps(
                         {c: {str(k): float(v[j]) for k, v in search["by_criterion"][c].items()}
                          for c in CRITERIA}),
                     "rounds_to_target": rtt, "error_at_stop": tr[2] if tr else math.nan})

    if best is None:
        raise RuntimeError("Teleportation: Algorithm 2 diverged for every lr")
    if d_best["reached"] and best["reached"]:
        speedup, sp_txt = d_best["rounds"] / best["rounds"], f"{d_best['rounds'] / best['rounds']:.1f}x"
    elif best["reached"]:
        speedup, sp_txt = cap / best["rounds"], f"> {cap / best['rounds']:.1f}x"
    elif d_best["reached"]:
        speedup, sp_txt = d_best["rounds"] / cap, f"< {d_best['rounds'] / cap:.2f}x"
    else:
        speedup, sp_txt = math.nan, "n/a (both > cap)"
    return {
        "sigma2": sigma2, "zeta2": zeta2, "topology": topology,
        "dsgd": {k: v for k, v in d_best.items() if k != "j"},
        "tele": {k: v for k, v in best.items() if k not in ("j", "curve")},
        "speedup": speedup, "speedup_text": sp_txt,
        "paper_k": PAPER_K.get((int(sigma2), int(zeta2)), (None, None))[TOPOLOGIES.index(topology)],
        "chosen_k_per_lr": {str(lr): k for lr, k in zip(lrs, search["chosen"])},
        "tele_by_criterion": {c: ({k: v for k, v in b.items() if k not in ("j", "curve")}
                                  if b is not None else None) for c, b in tele_by.items()},
        "chosen_k_per_lr_by_criterion": {c: {str(lr): k for lr, k in zip(lrs, search["chosen_by"][c])}
                                         for c in CRITERIA},
        "seconds": {"dsgd": t_dsgd, "search": t_search, "teleportation": t_tele - t_search},
        "lr_rows": rows,
        "curves": {"dsgd": d_curve, "tele": best["curve"]},
    }


# ---------------------------------------------------------------- verification
def verify(seed: int) -> dict:
    """Batched loop vs mpi_teleport.sim.simulate on short runs (sigma2 = zeta2 = 10)."""
    R, T, lrs = 200, 60, [0.01, 0.0025]
    out, ok = [], True
    base = {"nodes": N, "dim": D, "sigma2": 10.0, "zeta2": 10.0, "target": TARGET,
            "seed": seed, "log_every": 1, "progress": "off"}
    for algorithm, topology, k in (("dsgd", "ring", N), ("teleportation", "ring", 4),
                                   ("teleportation", "base2", 8)):
        problem = Quadratic(N, D, 10.0, 10.0, seed)
        bs = Batched(problem, topology)
        place = ((lambda t: schedule.fixed_holders(N)) if algorithm == "dsgd"
                 else (lambda t, k=k: schedule.holders(seed, N, k, t)))
        res = run_batch(bs, lrs, k, place, R, stop_first=False, exact=True, drop=False)
        for j, lr in enumerate(lrs):
            files = RunFiles(None)
            simulate(resolve({**base, "topology": topology, "rounds": R, "lr": lr, "k": k}),
                     algorithm, k, files)
            ref = np.array([r["error"] for r in files.records])
            mine, fast = res["exact_curves"][:, j], res["curves"][:, j]
            equal = bool(np.array_equal(ref, mine))
            rel = float(np.max(np.abs(fast - ref) / ref))
            ok &= equal and rel <= 1e-12
            out.append({"check": f"{algorithm} {topology} k={k} lr={lr} {R} rounds",
                        "trajectory_equal": equal, "fast_error_max_rel_diff": rel})
    for topology in ("ring", "base2"):
        bs = Batched(Quadratic(N, D, 10.0, 10.0, seed), topology)
        mine = search_k(bs, lrs, T, seed)
        for j, lr in enumerate(lrs):
            s = simulate(resolve({**base, "topology": topology, "rounds": T, "lr": lr, "k": "auto"}),
                         "teleportation", "auto", RunFiles(None))
            rel = max(abs(float(mine["by_criterion"][c][int(k)][j]) - v) / v
                      for c in CRITERIA for k, v in s["candidates_by_criterion"][c].items())
            picks = {c: mine["chosen_by"][c][j] for c in CRITERIA}
            same = picks == s["k_by_criterion"] and mine["chosen"][j] == s["k"]
            ok &= same and rel <= 1e-12
            out.append({"check": f"Alg.2 {topology} T={T} lr={lr} (every --k-select criterion)",
                        "chosen_k": s["k"], "k_by_criterion": s["k_by_criterion"],
                        "same_k": same, "candidates_max_rel_diff": rel})
    return {"ok": bool(ok), "checks": out}


# ---------------------------------------------------------------- outputs
def write_outputs(results, args, out: Path, prefix: str, verification, wall) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cols = ["sigma2", "zeta2", "topology", "dsgd_rounds", "dsgd_reached", "dsgd_lr",
            "tele_rounds", "tele_reached", "tele_lr", "tele_k", "paper_k", "speedup",
            "speedup_text", "cap", "search_rounds",
            *(f"{c}_{f}" for c in CRITERIA for f in ("k", "lr", "rounds", "reached"))]
    with open(out / f"{prefix}.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for r in results:
            w.writerow([r["sigma2"], r["zeta2"], r["topology"], r["dsgd"]["rounds"],
                        r["dsgd"]["reached"], r["dsgd"]["lr"], r["tele"]["rounds"],
                        r["tele"]["reached"], r["tele"]["lr"], r["tele"]["k"], r["paper_k"],
                        f"{r['speedup']:.4g}", r["speedup_text"], args.cap, args.search_rounds,
                        *(_tele_field(r, c, f) for c in CRITERIA
                          for f in ("k", "lr", "rounds", "reached"))])
    with open(out / f"{prefix}_lrs.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["sigma2", "zeta2", "topology", "method", "lr", "k", "rounds_to_target",
                    "error_at_stop", "alg2_candidates", "alg2_k_by_criterion",
                    "alg2_candidates_by_criterion"])
        for r in results:
            for row in r["lr_rows"]:
                w.writerow([r["sigma2"], r["zeta2"], r["topology"], row["method"], row["lr"],
                            row["k"], row["rounds_to_target"], f"{row['error_at_stop']:.6g}",
                            row["search_k"], row.get("k_by_criterion", ""),
                            row.get("candidates_by_criterion", "")])
    (out / f"{prefix}.md").write_text(markdown_table(results, args) + "\n" + criteria_table(results, args))
    plot(results, out / f"{prefix}.png", args)
    meta = {
        "args": vars(args), "python": sys.version.split()[0], "numpy": np.__version__,
        "machine": platform.platform(), "wall_time_s": wall, "verification": verification,
        "results": [{k: v for k, v in r.items() if k not in ("curves", "lr_rows")} for r in results],
        "curves": [{"sigma2": r["sigma2"], "zeta2": r["zeta2"], "topology": r["topology"],
                    **{m: thin(c) for m, c in r["curves"].items()}} for r in results],
    }
    (out / f"{prefix}.json").write_text(json.dumps(meta, indent=1, default=str))


def thin(curve: np.ndarray, points: int = 300) -> list:
    """[(round, error)] at about ``points`` log-spaced rounds (always the last one)."""
    last = len(curve) - 1
    idx = np.unique(np.concatenate(([0], np.geomspace(1, max(last, 1), points).astype(int), [last])))
    return [[int(i), float(curve[i])] for i in idx if i <= last]


def markdown_table(results, args) -> str:
    lines = [
        f"Rounds to error <= {TARGET:g} (n = {N}, d = {D}, seed {args.seed}); cap {args.cap} "
        f"rounds per run, Alg. 2 with T = {args.search_rounds} rounds per phase "
        f"(search rounds not counted). `> R`: not reached within R rounds.",
        "",
        "| sigma2 | zeta2 | topology | DSGD rounds | DSGD lr | Teleportation rounds | "
        "Teleportation lr | k (Alg. 2) | k (paper Table 1) | speed-up |",
        "|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        d, t = r["dsgd"], r["tele"]
        lines.append(f"| {r['sigma2']:g} | {r['zeta2']:g} | {r['topology']} | "
                     f"{fmt_rounds({'rounds': d['rounds'], 'reached': d['reached']})} | {d['lr']:g} | "
                     f"{fmt_rounds({'rounds': t['rounds'], 'reached': t['reached']})} | {t['lr']:g} | "
                     f"{t['k']} | {r['paper_k']} | {r['speedup_text']} |")
    return "\n".join(lines) + "\n"


def _tele_field(r: dict, criterion: str, field: str):
    b = r["tele_by_criterion"][criterion]
    return "" if b is None else b[field]


def criteria_table(results, args) -> str:
    """Table 1 analogue: the k Algorithm 2 picks (at each criterion's fastest lr) under
    every --k-select criterion, next to the paper's, with the rounds that k then needs."""
    lines = [
        f"Algorithm 2's k under each --k-select criterion (T = {args.search_rounds} rounds per "
        f"phase, seed {args.seed}; each criterion's k at its own fastest lr) and Teleportation's "
        f"rounds to {TARGET:g} with it (cap {args.cap}).",
        "",
        "| sigma2 | zeta2 | topology | k (paper Table 1) | "
        + " | ".join(f"k ({c})" for c in CRITERIA) + " | "
        + " | ".join(f"rounds ({c})" for c in CRITERIA) + " |",
        "|---:|---:|:---|---:|" + "---:|" * (2 * len(CRITERIA)),
    ]
    match = {c: 0 for c in CRITERIA}
    for r in results:
        ks, rounds = [], []
        for c in CRITERIA:
            b = r["tele_by_criterion"][c]
            ks.append("-" if b is None else str(b["k"]))
            rounds.append("-" if b is None else f"{fmt_rounds(b)} (lr {b['lr']:g})")
            match[c] += b is not None and b["k"] == r["paper_k"]
        lines.append(f"| {r['sigma2']:g} | {r['zeta2']:g} | {r['topology']} | {r['paper_k']} | "
                     + " | ".join(ks) + " | " + " | ".join(rounds) + " |")
    lines += ["", "Settings where the criterion's k equals the paper's: "
              + ", ".join(f"{c} {match[c]}/{len(results)}" for c in CRITERIA) + "."]
    return "\n".join(lines) + "\n"


def plot(results, path: Path, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted({r["sigma2"] for r in results})
    cols = sorted({(r["zeta2"], TOPOLOGIES.index(r["topology"])) for r in results})
    fig, axes = plt.subplots(len(rows), len(cols), figsize=(3.6 * len(cols), 2.9 * len(rows)),
                             squeeze=False)
    for ax in axes.flat:
        ax.set_visible(False)
    for r in results:
        ax = axes[rows.index(r["sigma2"])][cols.index((r["zeta2"], TOPOLOGIES.index(r["topology"])))]
        ax.set_visible(True)
        for key, label, color in (("dsgd", f"DSGD lr={r['dsgd']['lr']:g}", "tab:blue"),
                                  ("tele", f"Teleport. k={r['tele']['k']} lr={r['tele']['lr']:g}",
                                   "tab:red")):
            pts = np.array(thin(r["curves"][key], 400))
            ax.loglog(pts[1:, 0], pts[1:, 1], color=color, label=label, lw=1.2)
        ax.axhline(TARGET, color="gray", ls="--", lw=0.8)
        ax.set_title(f"{r['topology']}  $\\sigma^2$={r['sigma2']:g}  $\\zeta^2$={r['zeta2']:g}",
                     fontsize=9)
        ax.set_xlabel("round", fontsize=8)
        ax.set_ylabel("error", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"Error vs round, best lr per method (n={N}, d={D}, target {TARGET:g}, "
                 f"cap {args.cap}, Alg. 2 T={args.search_rounds})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main
def _run_setting(job):
    return run_setting(*job)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cap", type=int, default=None,
                    help="max rounds of each run (default 20000; 2000 with --quick)")
    ap.add_argument("--search-rounds", type=int, default=None,
                    help="Alg. 2 rounds per phase T (default 1000; 200 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="tiny CI check: 2 settings, 3 lrs, small cap; writes bench_synthetic_quick.*")
    ap.add_argument("--all-lrs", action="store_true",
                    help="run every lr to the target or the cap (default: a batch stops at "
                         "its first lr reaching the target)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=2,
                    help="settings run in parallel worker processes (default 2)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    if args.cap is None:
        args.cap = 2000 if args.quick else 100_000
    if args.search_rounds is None:
        args.search_rounds = 200 if args.quick else 1000
    if args.cap < 1 or args.search_rounds < 1:
        ap.error("--cap and --search-rounds must be >= 1")
    if args.quick:
        settings = [(10.0, 10.0, "ring"), (0.0, 100.0, "base2")]
        lrs = [0.01, 0.005, 0.001]
        prefix = "bench_synthetic_quick"
    else:
        settings = [(s, z, tp) for s in NOISES for z in HETEROS for tp in TOPOLOGIES]
        lrs = list(LRS)
        prefix = "bench_synthetic"

    start = time.perf_counter()
    t = time.perf_counter()
    verification = verify(args.seed)
    print(f"verification (batched vs simulate): {'OK' if verification['ok'] else 'FAILED'} "
          f"({time.perf_counter() - t:.1f}s)", flush=True)
    for c in verification["checks"]:
        print("  ", c, flush=True)
    jobs = [(s, z, tp, lrs, args.cap, args.search_rounds, args.seed, args.all_lrs)
            for s, z, tp in settings]
    if args.jobs > 1:
        import multiprocessing as mp

        pool = mp.get_context("fork").Pool(args.jobs)
        stream = pool.imap(_run_setting, jobs)
    else:
        pool, stream = None, map(_run_setting, jobs)
    results = []
    for i, r in enumerate(stream, 1):
        s, z, tp = r["sigma2"], r["zeta2"], r["topology"]
        results.append(r)
        d, te = r["dsgd"], r["tele"]
        print(f"[{i}/{len(settings)}] sigma2={s:g} zeta2={z:g} {tp}: DSGD "
              f"{fmt_rounds(d)} (lr {d['lr']:g}) | Teleportation {fmt_rounds(te)} "
              f"(lr {te['lr']:g}, k {te['k']}; paper k {r['paper_k']}; k by criterion "
              f"{ {c: _tele_field(r, c, 'k') for c in CRITERIA} }) | speed-up "
              f"{r['speedup_text']} | {sum(r['seconds'].values()):.1f}s "
              f"(dsgd {r['seconds']['dsgd']:.1f}, search {r['seconds']['search']:.1f}, "
              f"tele {r['seconds']['teleportation']:.1f}) | total "
              f"{time.perf_counter() - start:.0f}s", flush=True)
    if pool is not None:
        pool.close()
        pool.join()
    wall = time.perf_counter() - start
    write_outputs(results, args, Path(args.out), prefix, verification, wall)
    print(markdown_table(results, args))
    print(criteria_table(results, args))
    print(f"wall time {wall:.1f}s; wrote {prefix}.{{csv,md,png,json}}, {prefix}_lrs.csv to {args.out}")
    return 0 if verification["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
