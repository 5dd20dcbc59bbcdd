"""The printed comparison table of a job's runs, shared by the simulator and the MPI
command line."""
from __future__ import annotations

import math
from pathlib import Path

from ..disk.output import write_json






def label(summary: dict) -> str:
    if summary["algorithm"] == "dsgd":
        return f"Decentralized SGD ({summary['topology']})"
    k = f"auto->{summary['k']}" if summary.get("k_search") == "auto" else summary["k"]
    return f"Teleportation (k={k}, {summary['topology']})"


def _fmt(x, spec):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def table(summaries: list[dict]) -> str:
    """A short table: rounds to target, final error, wall time."""
    target = summaries[0]["target"]
    metric = next((key[len("final_"):] for key in summaries[0]
                   if key.startswith("final_") and key != "final_consensus"), "error")
    reach = f"rounds to {target:g}" if target is not None else "rounds to target"
    rows = [("method", reach, f"final {metric}", "wall time")]
    for s in summaries:
        reached = s["rounds_to_target"]
        rows.append((
            label(s),
            str(reached) if reached is not None else ("-" if target is None else f"> {s['rounds_run']}"),
            _fmt(s.get(f"final_{metric}"), ".4f" if metric == "accuracy" else ".3e"),
            f"{s['wall_time_s']:.2f} s",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def candidates_table(summary: dict) -> str:
    """Algorithm 2's candidates: the value of every selection criterion (the one that
    chose marked with *), final error, rounds to target; then each criterion's choice."""
    final_key = next(key for key in summary if key.startswith("candidate_final_"))
    name = "final " + final_key[len("candidate_final_"):]
    target = summary["target"]
    chosen_by = summary.get("k_select", "averaged")
    by_criterion = summary.get("candidates_by_criterion") or {chosen_by: summary["candidates"]}
    criteria = list(by_criterion)
    rows = [("k", *(c + ("*" if c == chosen_by else "") for c in criteria), name,
             f"rounds to {target:g}" if target is not None else "rounds to target")]
    spec = ".4f" if "accuracy" in str(summary.get("validation")) else ".3e"
    for k in summary["candidates"]:
        reached = summary["candidate_rounds_to_target"][k]
        mark = " <- chosen" if int(k) == summary["k"] else ""
        final = summary[final_key]
        rows.append((k, *(_fmt(by_criterion[c][k], spec) for c in criteria), _fmt(final[k], spec),
                     (str(reached) if reached is not None else
                      "-" if target is None else f"> {summary['rounds_per_phase']}") + mark))
    cols = len(rows[0])
    widths = [max(len(r[i]) for r in rows) for i in range(cols)]
    lines = ["  ".join(c.rjust(w) if i < cols - 1 else c for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    picks = summary.get("k_by_criterion")
    if picks:
        lines.append(f"validation metric: {summary['validation']}; * = the --k-select "
                     "criterion; best k by criterion: "
                     + ", ".join(f"{c} {k}" for c, k in picks.items()))
    return "\n".join(lines)


def header(cfg, where: str) -> str:
    """First line of the printed summary: where it ran and the problem's settings."""
    if cfg.problem == "quadratic":
        detail = f"sigma2={cfg.sigma2:g}, zeta2={cfg.zeta2:g}"
    elif ":" in cfg.problem:
        detail = f"seed={cfg.seed}"
    else:
        detail = f"alpha={cfg.alpha:g}, batch={cfg.batch_size}, momentum={cfg.momentum:g}"
    return f"{where}, problem={cfg.problem}, {detail}, lr={cfg.lr:g}"


def finish(cfg, summaries: list[dict], header: str) -> str:
    """The text printed at the end; also writes comparison.json for compare runs."""
    if cfg.algorithm == "compare" and cfg.out is not None:
        write_json(Path(cfg.out) / "comparison.json", {s["algorithm"]: s for s in summaries})
    text = f"{header}\n{table(summaries)}"
    for s in summaries:
        if s.get("k_search") == "auto":
            text += ("\n\nAlgorithm 2 (k auto): phase 1 with k = n, phase 2 with the candidates "
                     f"concurrently, {s['rounds_per_phase']} rounds each\n{candidates_table(s)}")
    return text

