"""Rounds per second of the network problems under MPI, where a round's time goes, memory
per rank and the time of one shared evaluation.

    python benchmarks/bench_networks.py [--quick] [--out benchmarks/results]
                                        [--models lenet vgg] [--ranks 8 25]
                                        [--algorithms teleportation dsgd] [--device cpu]
                                        [--full-size] [--python PY ...]

One ``mpirun`` per (model, ranks): the script launches itself with ``--worker``; inside,
every rank builds the run as ``mpi_teleport.run.run_on_ranks`` does (``make_problem`` with
its own node's data only, ``local_nodes=[rank]``, the
RunSpec of ``cli.run_spec``, ``backends.mpi.MpiBackend`` over a ``Transport`` =
Algorithm 3) and runs each algorithm for W warm-up rounds and then R timed rounds,
calling ``backend.step(t)`` as the engine does between logging rounds (no logging; a
timestamp after every round).

Split of a round, per rank, measured from outside the package (nothing in it is edited):

* **compute** -- the numerical work of the round, in two parts timed separately:
  the **gradient** (wall time inside ``problem.gradient``: load the token into the model,
  forward, backward, copy the gradient out; a proxy object around the problem) and the
  **update arithmetic** (the momentum/SGD step of ``local_step`` minus the gradient inside
  it, and the gossip weighted sum ``weighted_sum``: element-wise numpy on the token,
  what any implementation of the method has to compute);
* **comm** -- wall time blocked in ``transport.wait`` / ``transport.wait_all`` (MPI
  Waitall): a proxy around the transport (posting or starting requests is not blocking
  and counts as framework);
* **framework** -- the rest of the round: what the package does around the numbers,
  the schedule (the phase's roster), topology evaluation (``topology.mixing``, as the
  plan calls it), posting/starting requests, Python glue. These parts are timed
  separately as profile evidence (wrapped where ``backends.mpi`` and ``plan`` look them
  up; worker process only).
  "fw+arith %" is the stricter reading that counts the update arithmetic as framework too.

The table sums these over all ranks and timed rounds (rank-seconds) and gives each as a
share of the rank-seconds of the round; "active fw %" repeats the split over the
rank-rounds in which the rank computed a step (token holders only). CPU time
(``time.thread_time``) is recorded for every part too, and "fw/(fw+comp) cpu %" is the
framework's share of the CPU work the ranks do themselves: on an oversubscribed host (25
ranks on 2 cores, plus other jobs) wall time spent descheduled lands in whichever part
was running, the CPU share does not see it. Target: framework < 5 % of a round (PASS/FAIL
per row, on the all-ranks wall split). The timing wrappers themselves (~3 us a call, about
eight calls a round) are not subtracted: they count as framework. Ranks that would not fit
into the available memory (about 0.75 GB per VGG rank: torch itself ~0.3 GB, 12
model-sized vectors) are skipped with a note (``--force`` runs them).

Memory and evaluation, per row (the helpers are ``bench_memory``'s, which has the full
breakdown): every rank records its RSS right after ``import torch`` and the floor (peak RSS
after importing torch and setting it up as the run does, before the problem is built), and,
once the row's timed rounds and evaluation are over, its peak resident set size
(``ru_maxrss``: the peak of the process so far, so a later algorithm's row includes the
earlier ones') and its proportional set size (``Pss`` of ``/proc/self/smaps_rollup``:
shared library pages divided among the processes that map them). Rank 0 gathers them: the
row has the peak RSS per rank (max and min over ranks), the floor, the PSS (max over ranks
and their sum). Evaluation: after the timed rounds, the averaged model is evaluated as the
engine does at a logging round (the tokens gathered on rank 0, ``MpiBackend.evaluate``:
every rank its slice of the test set); ``eval_s`` is the median wall time of 3 (after one
untimed), ``eval_cpu_s_max_rank`` the CPU time of the busiest rank, with the test set's
size. ``--python`` runs every row again with another interpreter (e.g. one whose torch is a
CPU-only build, with the ``mpirun`` beside it); a row says which torch it ran.

Data: the real data sets are not needed. A small fake data set is written in the REAL
on-disk formats into a temporary directory -- ``FashionMNIST/raw/*-idx?-ubyte`` (IDX)
and ``cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}`` (python pickles) --
and passed as ``--data-dir``; the loaders parse them with torchvision as they would the
real files. ``--full-size`` writes Fashion-MNIST at its real size (60,000 + 10,000 images,
``bench_memory.write_fake_fashion_mnist``) so the memory figures are those of the real
data set, and writes ``bench_networks_full.*``; CIFAR-10 stays small (1,000 + 200) either
way. Shapes are the real ones (1x28x28 LeNet-5, 3x32x32 VGG-11), so the per-round
cost is that of the real problem. CIFAR-10's loader verifies torchvision's md5 sums by
default and the package has no setting to skip it, so the worker calls
``datasets.load_cifar10`` / ``open_cifar10`` with ``verify_md5=False`` (wrappers installed
in the worker only).

Devices: ``--device cpu`` (default) pins every rank to one torch thread, as the runtime
does. ``--device cuda`` runs the same with ``--device cuda`` (rank -> GPU by local rank,
host staging of the token vector); it is skipped with a note when no CUDA device is
visible.

Writes bench_networks[_full][_quick].{csv,json,png} into --out.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import pickle
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(1, str(ROOT / "benchmarks"))

from bench_memory import BEFORE_MB, pss_mb, write_fake_fashion_mnist  # noqa: E402
from bench_memory import TARGET as TARGET_MEMORY  # noqa: E402
from mpi_teleport.measure import find_mpirun, mpi_env, mpirun_command  # noqa: E402

TARGET_FRAMEWORK = 0.05
MODELS = {"lenet": "fashion-mnist", "vgg": "cifar10"}
MODEL_NAMES = {"lenet": "LeNet-5 (Fashion-MNIST shapes)", "vgg": "VGG-11 GN (CIFAR-10 shapes)"}
BATCH = 32
LR = 0.01
MOMENTUM = 0.9


def plan(model: str, ranks: int, quick: bool) -> tuple[int, int]:
    """(warm-up rounds, timed rounds)."""
    if model == "vgg":
        return (1, 2) if quick else (1, 4)
    return (2, 5) if quick else (5, 30)


def k_for(ranks: int) -> int:
    """Teleportation's active nodes: the package default min(8, n), halved at n = 8 so
    that Teleportation has inactive nodes there too (8 ranks: 4, 25 ranks: 8)."""
    return max(1, ranks // 2) if ranks <= 8 else 8


# --------------------------------------------------------------------- fake data sets
def write_fake_cifar(root: str, per_batch: int = 200, n_test: int = 200) -> None:
    base = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(base, exist_ok=True)
    g = np.random.default_rng(1)

    def dump(name, n):
        x = g.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)  # R, G, B planes
        y = g.integers(0, 10, size=n).tolist()
        entry = {"batch_label": name, "labels": y, "data": x,
                 "filenames": [f"{i}.png" for i in range(n)]}
        with open(os.path.join(base, name), "wb") as f:
            pickle.dump(entry, f, protocol=2)

    for i in range(1, 6):
        dump(f"data_batch_{i}", per_batch)
    dump("test_batch", n_test)
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"],
            "num_cases_per_batch": per_batch, "num_vis": 3072}
    with open(os.path.join(base, "batches.meta"), "wb") as f:
        pickle.dump(meta, f, protocol=2)


# ----------------------------------------------------------------------------- worker
class Clock:
    """Accumulated wall and CPU seconds of one kind of work on this rank."""

    def __init__(self):
        self.wall = 0.0
        self.cpu = 0.0
        self.calls = 0

    def reset(self):
        self.wall = self.cpu = 0.0
        self.calls = 0

    def timed(self, fn):
        def wrapper(*args, **kwargs):
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.wall += time.perf_counter() - w0
                self.cpu += time.thread_time() - c0
                self.calls += 1
        return wrapper


class Timed:
    """``obj`` with the named methods timed on the given clocks; everything else delegated
    (the problem's ``gradient``, the transport's ``wait`` and posts, ``topology.mixing``)."""

    def __init__(self, obj, **clocks: Clock):
        self._obj = obj
        for name, clock in clocks.items():
            setattr(self, name, clock.timed(getattr(obj, name)))

    def __getattr__(self, name):
        return getattr(self._obj, name)


def worker(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    try:
        result = _worker(args, comm, rank, size)
    except BaseException:
        import traceback

        sys.stderr.write(f"[rank {rank}] {traceback.format_exc()}")
        sys.stderr.flush()
        comm.Abort(1)
        return 1
    if rank == 0:
        Path(args.result).write_text(json.dumps(result))
    return 0


def _worker(args, comm, rank: int, size: int) -> dict:
    import functools

    from mpi4py import MPI

    from mpi_teleport.measure import keep_freed_memory

    keep_freed_memory()  # as mpi_teleport.run's main does first
    import torch

    import_mb = max_rss_mb()
    from mpi_teleport.measure import models

    models.configure_torch_threads(1)  # as the run sets torch up: the floor (bench_memory's)
    floor_mb = max_rss_mb()

    from mpi_teleport.measure import cli, settings as config
    from mpi_teleport.measure import plan as plan_module
    from mpi_teleport.measure import compiled_backend as compiled_rounds
    from mpi_teleport.measure import mpi_backend
    from mpi_teleport.measure import datasets, make_problem
    from mpi_teleport.measure import Transport

    # fake CIFAR-10 files cannot pass torchvision's md5 check: skip it (worker only)
    datasets.load_cifar10 = functools.partial(datasets.load_cifar10, verify_md5=False)
    datasets.open_cifar10 = functools.partial(datasets.open_cifar10, verify_md5=False)

    clocks = {name: Clock() for name in ("compute", "comm", "local_step", "weighted_sum",
                                         "schedule", "topology", "post")}
    # framework parts, wrapped where the back end and the plan look them up (worker only)
    # (the compiled rounds, the default path, and the round executor's arithmetic)
    from mpi_teleport.measure import device_backend as device_tokens

    # (device_tokens: tokens on a GPU, looked up there at each call; their step and sum end
    # in a copy to the host, so the wall times hold the GPU's work)
    for module in (compiled_rounds, mpi_backend, device_tokens):
        module.local_step = clocks["local_step"].timed(module.local_step)
        module.weighted_sum = clocks["weighted_sum"].timed(module.weighted_sum)
    plan_module.topo = Timed(plan_module.topo, mixing=clocks["topology"])

    problem_name = MODELS[args.model]
    k_tele = k_for(size)
    base = config.resolve({"problem": problem_name, "data_dir": args.data_dir, "lr": LR,
                           "momentum": MOMENTUM, "batch_size": BATCH, "alpha": 0.1,
                           "device": args.device, "algorithm": "teleportation",
                           "k": k_tele, "topology": "ring", "seed": 0}, world_size=size)
    t_load = time.perf_counter()
    transport = Transport(comm)
    local = transport.local_rank() if args.device == "cuda" else 0
    problem = make_problem(cli.problem_of(base), local, local_nodes=[rank])  # its data only, as the run does
    load_s = time.perf_counter() - t_load
    timed_problem = Timed(problem, gradient=clocks["compute"])
    # the per-round path posts and waits (post_recvs/post_sends, wait); the fast path
    # starts persistent channels and waits on them (start, wait_all)
    timed_transport = Timed(transport, wait=clocks["comm"], wait_all=clocks["comm"],
                            post_recvs=clocks["post"], post_sends=clocks["post"],
                            start=clocks["post"])
    warm, timed = args.warmup, args.rounds
    results = []
    for algorithm in args.algorithms:
        cfg = base.replace(algorithm=algorithm)
        k = size if algorithm == "dsgd" else k_tele
        spec = cli.run_spec(cfg, algorithm, k)
        spec = type(spec)(spec.algorithm, spec.nodes, spec.k, warm + timed, spec.lr,
                          spec.momentum, spec.topology, spec.variant, spec.seed)
        phase = spec.phases()[0]
        phase.roster = clocks["schedule"].timed(phase.roster)
        backend = mpi_backend.MpiBackend(timed_problem, spec, timed_transport)
        backend.begin(phase, 0, problem.initial())
        # warm-up: allocations, first-touch, torch's lazy init
        for t in range(0, warm):
            backend.step(t)
        comm.Barrier()
        for c in clocks.values():
            c.reset()
        per_round = []  # (wall, gradient, arithmetic, comm, active) per timed round on this rank
        cpu0 = time.thread_time()
        t0 = prev = time.perf_counter()
        last = {name: c.wall for name, c in clocks.items()}
        for t in range(warm, warm + timed):
            backend.step(t)
            now = time.perf_counter()
            delta = {name: c.wall - last[name] for name, c in clocks.items()}
            last = {name: c.wall for name, c in clocks.items()}
            grad = delta["compute"]
            arith = delta["local_step"] - grad + delta["weighted_sum"]
            per_round.append((now - prev, grad, arith, delta["comm"], grad > 0))
            prev = now
        t1 = time.perf_counter()
        cpu_total = time.thread_time() - cpu0
        comm.Barrier()
        t_all = time.perf_counter() - t0
        wall = t1 - t0
        mine = {
            "wall": wall,
            "cpu_total": cpu_total,
            **{name: c.wall for name, c in clocks.items()},
            **{f"cpu_{name}": c.cpu for name, c in clocks.items()},
            "grad_calls": clocks["compute"].calls,
            "active_wall": sum(p[0] for p in per_round if p[4]),
            "active_gradient": sum(p[1] for p in per_round if p[4]),
            "active_arith": sum(p[2] for p in per_round if p[4]),
            "active_comm": sum(p[3] for p in per_round if p[4]),
            "active_rounds": sum(1 for p in per_round if p[4]),
        }
        gathered = comm.gather(mine, root=0)
        elapsed = comm.reduce(t_all, op=MPI.MAX, root=0)
        eval_s, eval_cpu_s = time_evaluation(backend, problem, comm)
        memory = comm.gather({"torch_import_mb": import_mb, "torch_floor_mb": floor_mb,
                              "peak_rss_mb": max_rss_mb(), "pss_mb": pss_mb(),
                              "eval_cpu_s": eval_cpu_s}, root=0)
        backend.close()
        del backend
        if rank == 0:
            row = summarise(args.model, size, algorithm, k, timed, elapsed, gathered,
                            problem, load_s, args.device)
            row.update(memory_columns(memory, eval_s, problem, torch.__version__))
            results.append(row)
    return {"results": results}


def max_rss_mb() -> float:
    """This process's peak resident set size so far (``ru_maxrss``, KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_evaluation(backend, problem, comm, repeats: int = 3) -> tuple[float, float]:
    """(median wall, median CPU seconds of this rank) of one evaluation of the averaged
    model as the engine does it at a logging round: the tokens gathered on the root
    (``backend.tokens``), then ``backend.evaluate`` (collective: every rank its slice of
    the test set). One untimed evaluation first (torch's first forward on a batch size)."""
    x = backend.tokens(0)
    backend.evaluate(problem, x)
    walls, cpus = [], []
    for _ in range(repeats):
        comm.Barrier()
        w0, c0 = time.perf_counter(), time.process_time()
        backend.evaluate(problem, x)
        cpus.append(time.process_time() - c0)
        comm.Barrier()
        walls.append(time.perf_counter() - w0)
    return statistics.median(walls), statistics.median(cpus)


def memory_columns(per_rank: list[dict], eval_s: float, problem, torch_version: str) -> dict:
    """A row's memory and evaluation columns from every rank's figures (MB, seconds)."""
    pss = [r["pss_mb"] for r in per_rank if r["pss_mb"] is not None]
    return {
        "torch": torch_version,
        "peak_rss_mb_max": max(r["peak_rss_mb"] for r in per_rank),
        "peak_rss_mb_min": min(r["peak_rss_mb"] for r in per_rank),
        "torch_import_mb": max(r["torch_import_mb"] for r in per_rank),
        "torch_floor_mb": max(r["torch_floor_mb"] for r in per_rank),
        "pss_mb_max": max(pss) if pss else None,
        "pss_mb_sum": sum(pss) if pss else None,
        "eval_s": eval_s,
        "eval_cpu_s_max_rank": max(r["eval_cpu_s"] for r in per_rank),
        "test_samples": int(getattr(problem, "n_test", 0)) or None,
    }


def summarise(model, ranks, algorithm, k, timed, elapsed, per_rank, problem, load_s, device) -> dict:
    def total(key):
        return float(sum(r[key] for r in per_rank))

    def cpu_total(key):
        return total("cpu_" + key)

    wall, grad, wait = total("wall"), total("compute"), total("comm")
    step_arith = total("local_step") - grad  # local_step includes the gradient
    gossip = total("weighted_sum")
    arith = step_arith + gossip
    comp = grad + arith
    frame = wall - comp - wait
    cpu_grad = cpu_total("compute")
    cpu_arith = cpu_total("local_step") - cpu_grad + cpu_total("weighted_sum")
    cpu_comp = cpu_grad + cpu_arith
    cpu_frame = total("cpu_total") - cpu_comp - cpu_total("comm")
    a_wall, a_comm = total("active_wall"), total("active_comm")
    a_comp = total("active_gradient") + total("active_arith")
    a_frame = a_wall - a_comp - a_comm
    measured_parts = total("schedule") + total("topology") + total("post")
    cpu_parts = cpu_total("schedule") + cpu_total("topology") + cpu_total("post")
    return {
        "model": model,
        "problem": MODELS[model],
        "device": device,
        "ranks": ranks,
        "algorithm": algorithm,
        "k": k,
        "timed_rounds": timed,
        "rounds_per_s": timed / elapsed,
        "round_s": elapsed / timed,
        "n_params": int(problem.n_params),
        "message_mb": problem.dim * 4 / 1e6,
        # shares of the rank-seconds of the round (all ranks, all timed rounds)
        "compute_pct": 100 * comp / wall,
        "gradient_pct": 100 * grad / wall,
        "arith_pct": 100 * arith / wall,
        "step_arith_pct": 100 * step_arith / wall,
        "gossip_sum_pct": 100 * gossip / wall,
        "comm_pct": 100 * wait / wall,
        "framework_pct": 100 * frame / wall,
        # the stricter reading: the update arithmetic counted as framework too
        "framework_and_arith_pct": 100 * (frame + arith) / wall,
        "active_compute_pct": 100 * a_comp / a_wall if a_wall else None,
        "active_comm_pct": 100 * a_comm / a_wall if a_wall else None,
        "active_framework_pct": 100 * a_frame / a_wall if a_wall else None,
        "framework_cpu_pct": 100 * cpu_frame / wall,
        # CPU seconds: framework / (framework + compute), i.e. its share of the work the
        # ranks do themselves; immune to descheduling on an oversubscribed host
        "framework_cpu_share_pct": 100 * cpu_frame / (cpu_frame + cpu_comp),
        "framework_schedule_pct": 100 * total("schedule") / wall,
        "framework_topology_pct": 100 * total("topology") / wall,
        "framework_post_pct": 100 * total("post") / wall,
        "framework_other_pct": 100 * (frame - measured_parts) / wall,
        # CPU seconds by part, as shares of framework + compute CPU
        "cpu_parts_pct": {
            name: 100 * value / (cpu_frame + cpu_comp)
            for name, value in (
                ("step_arith", cpu_total("local_step") - cpu_grad),
                ("gossip_sum", cpu_total("weighted_sum")),
                ("schedule", cpu_total("schedule")),
                ("topology", cpu_total("topology")),
                ("post", cpu_total("post")),
                ("other", cpu_frame - cpu_parts),
            )},
        "grad_cpu_ms": 1000 * cpu_grad / max(1, total("grad_calls")),
        "grad_ms": 1000 * grad / max(1, total("grad_calls")),
        "grad_calls": int(total("grad_calls")),
        "rank_seconds": wall,
        "setup_s": load_s,
        "pass": frame / wall < TARGET_FRAMEWORK,
    }


# ------------------------------------------------------------------------------ driver
def worker_env() -> dict:
    """mpirun's environment (root allowed) with one thread per rank and this checkout
    importable."""
    env = mpi_env()
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def launch(model, ranks, args, data_dir, device, python) -> list[dict] | None:
    warm, timed = plan(model, ranks, args.quick)
    if args.rounds:
        timed = args.rounds
    if args.warmup is not None:
        warm = args.warmup
    with tempfile.TemporaryDirectory(prefix="bench_networks_") as tmp:
        result = os.path.join(tmp, "result.json")
        cmd = mpirun_command(ranks, [
            python, str(Path(__file__).resolve()), "--worker", "--model", model,
            "--data-dir", data_dir, "--result", result, "--warmup", str(warm),
            "--rounds", str(timed), "--device", device, "--algorithms", *args.algorithms],
            find_mpirun(python))
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=worker_env(), timeout=args.timeout)
        print(f"  ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
        if proc.returncode != 0 or not os.path.exists(result):
            print(f"bench_networks: {model} x {ranks} ranks failed (exit {proc.returncode})",
                  file=sys.stderr)
            return None
        rows = json.loads(Path(result).read_text())["results"]
        for row in rows:
            row["data"] = data_label(model, args)
            row["python"] = python
        return rows


def data_label(model: str, args) -> str:
    """Which data set the row ran on (the memory figures depend on it)."""
    if args.data_dir is not None:
        return "given --data-dir"
    if model == "lenet" and args.full_size:
        return "fake, full size (60,000 + 10,000)"
    return "fake, small (1,000 + 200)"  # CIFAR-10 stays small even with --full-size


PARAMS = {"lenet": 61_706, "vgg": 9_228_362}


def rank_memory_mb(model: str) -> float:
    """Private (anonymous) memory of one CPU rank, measured here (peak of
    /proc/PID/smaps_rollup Private_* over a 2-rank run): ~290 MB for torch + torchvision +
    the interpreter, plus ~12 float32 vectors of the model's size (the FlatState's
    parameters and gradient, the problem's initial vector, the token's x, y, v, v_in and
    gossip inputs) and the activations: VGG-11 peaked at 750 MB."""
    return 300 + 12 * 4 * PARAMS[model] / 2**20


def mem_available_mb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def cuda_available() -> bool:
    try:
        out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                             capture_output=True, text=True, timeout=120)
        return out.stdout.strip() == "True"
    except Exception:
        return False


FIELDS = ["model", "device", "ranks", "algorithm", "k", "timed_rounds", "rounds_per_s", "round_s",
          "compute_pct", "gradient_pct", "arith_pct", "step_arith_pct", "gossip_sum_pct",
          "comm_pct", "framework_pct", "framework_and_arith_pct", "active_compute_pct",
          "active_comm_pct", "active_framework_pct", "framework_cpu_pct",
          "framework_cpu_share_pct", "framework_schedule_pct", "framework_topology_pct",
          "framework_post_pct", "framework_other_pct", "grad_ms", "grad_cpu_ms", "message_mb",
          "pass", "data", "torch", "peak_rss_mb_max", "peak_rss_mb_min", "torch_import_mb",
          "torch_floor_mb", "pss_mb_max", "pss_mb_sum", "eval_s", "eval_cpu_s_max_rank",
          "test_samples"]


def _mb(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def memory_cells(r: dict) -> tuple[str, ...]:
    """Peak RSS per rank (min-max), torch floor, PSS per rank (max), evaluation wall time;
    "-" for rows measured before these columns existed."""
    if r.get("peak_rss_mb_max") is None:
        return ("-", "-", "-", "-")
    peak = f"{r['peak_rss_mb_min']:.0f}-{r['peak_rss_mb_max']:.0f}"
    ev = f"{r['eval_s']:.3f} ({r['test_samples']})" if r.get("test_samples") else f"{r['eval_s']:.3f}"
    return (peak, _mb(r.get("torch_floor_mb")), _mb(r.get("pss_mb_max")), ev)


def table(rows: list[dict]) -> str:
    head = ("model", "dev", "ranks", "algorithm", "k", "rounds/s", "gradient %", "arith %",
            "comm %", "framework %", "fw+arith %", "active fw %", "fw/(fw+comp) cpu %", "",
            "torch", "peak RSS MB", "floor MB", "PSS MB", "eval s (test n)")
    lines = [head]
    for r in rows:
        lines.append((r["model"], r["device"], str(r["ranks"]), r["algorithm"], str(r["k"]),
                      f"{r['rounds_per_s']:.3f}", f"{r['gradient_pct']:.1f}",
                      f"{r['arith_pct']:.1f}", f"{r['comm_pct']:.1f}",
                      f"{r['framework_pct']:.2f}", f"{r['framework_and_arith_pct']:.2f}",
                      "-" if r["active_framework_pct"] is None else f"{r['active_framework_pct']:.2f}",
                      f"{r['framework_cpu_share_pct']:.2f}", "PASS" if r["pass"] else "FAIL",
                      r.get("torch") or "-", *memory_cells(r)))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    out = ["  ".join(c.rjust(w) if i > 0 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
           for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    torches = {r.get("torch") for r in rows}
    labels = [f"{r['model']}\n{r['ranks']} ranks\n"
              + (f"tele k={r['k']}" if r["algorithm"] == "teleportation" else "dsgd")
              + (f"\n{r['device']}" if r["device"] != "cpu" else "")
              + (f"\ntorch {r['torch'].split('+')[-1]}" if len(torches) > 1 else "")
              for r in rows]
    x = np.arange(len(rows))
    with_memory = any(r.get("peak_rss_mb_max") is not None for r in rows)
    if with_memory:  # three panels stacked, legends on the right
        fig, axes = plt.subplots(3, 1, figsize=(max(10, 1.1 * len(rows) + 6), 15))
        legend = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "ncol": 1}
    else:
        fig, axes = plt.subplots(1, 2, figsize=(max(12, 2.2 * len(rows) + 3), 5.6))
        legend = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.2)}
    ax, bx = axes[0], axes[1]
    bottom = np.zeros(len(rows))
    for key, name, colour in (("gradient_pct", "compute: gradient (forward/backward)", "#4C72B0"),
                              ("arith_pct", "compute: update arithmetic (momentum step, "
                               "gossip sum)", "#8172B2"),
                              ("comm_pct", "communication (blocked in MPI wait)", "#DD8452"),
                              ("framework_pct", "framework (the rest)", "#C44E52")):
        vals = np.array([r[key] for r in rows])
        ax.bar(x, vals, bottom=bottom, label=name, color=colour)
        bottom += vals
    for i, r in enumerate(rows):
        ax.text(i, 101, f"{r['rounds_per_s']:.3g} r/s\nfw {r['framework_pct']:.1f}%",
                ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("share of the rank-seconds of a round (%)")
    ax.set_ylim(0, 115)
    ax.set_title("wall-clock split of a round (all ranks)", fontsize=9)
    ax.legend(fontsize=7, **{"ncol": 1, **legend})

    # framework parts at the bottom (the 5 % line is theirs), the update arithmetic
    # (compute, not framework) hatched on top for comparison
    parts = (("schedule", "framework: schedule (holders)", "#CCB974", None),
             ("topology", "framework: topology (mixing)", "#64B5CD", None),
             ("post", "framework: posting Isend/Irecv", "#DD8452", None),
             ("other", "framework: other (Python glue)", "#999999", None),
             ("step_arith", "compute: momentum/SGD step", "#8172B2", "//"),
             ("gossip_sum", "compute: gossip weighted sum", "#55A868", "//"))
    bottom = np.zeros(len(rows))
    for key, name, colour, hatch in parts:
        vals = np.array([max(0.0, r.get("cpu_parts_pct", {}).get(key, 0.0)) for r in rows])
        bx.bar(x, vals, bottom=bottom, label=name, color=colour, hatch=hatch,
               alpha=0.6 if hatch else 1.0)
        bottom += vals
    bx.axhline(100 * TARGET_FRAMEWORK, color="k", ls="--", lw=1, label="5 % target")
    bx.set_xticks(x)
    bx.set_xticklabels(labels, fontsize=7)
    bx.set_ylabel("CPU time / (framework + compute) CPU time (%)")
    bx.set_title("CPU time by part, excluding the gradient (descheduling excluded)", fontsize=9)
    bx.legend(fontsize=7, **{"ncol": 2, **legend})
    if with_memory:
        plot_memory(axes[2], rows, x, labels, legend)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def plot_memory(mx, rows: list[dict], x, labels, legend: dict) -> None:
    """Peak RSS per rank (bar: max over ranks, tick: min), PSS at the end (hatched), the
    torch floor (dash) and the evaluation wall time written above each bar."""
    peak = np.array([r.get("peak_rss_mb_max") or 0.0 for r in rows])
    low = np.array([r.get("peak_rss_mb_min") or 0.0 for r in rows])
    mx.bar(x, peak, color="#4C72B0", label="peak RSS per rank (max over ranks)")
    mx.scatter(x, low, marker="_", s=300, color="k", label="peak RSS per rank (min)")
    mx.bar(x, [r.get("pss_mb_max") or 0.0 for r in rows], color="none", hatch="//",
           edgecolor="black", label="PSS at the end (max over ranks)")
    mx.scatter(x, [r.get("torch_floor_mb") or 0.0 for r in rows], marker="D", color="#C44E52",
               label="torch floor (import + set-up)", zorder=3)
    mx.axhline(BEFORE_MB, color="grey", ls=":", label=f"{BEFORE_MB:.0f} MB (before per-rank data)")
    mx.axhline(TARGET_MEMORY * BEFORE_MB, color="red", ls="--",
               label=f"target {TARGET_MEMORY:.0%} (full-size Fashion-MNIST, 4 ranks)")
    for i, r in enumerate(rows):
        if r.get("eval_s") is not None:
            mx.text(i, peak[i] + 15, f"eval {r['eval_s']:.2f} s", ha="center", va="bottom",
                    fontsize=7)
    mx.set_xticks(x)
    mx.set_xticklabels(labels, fontsize=7)
    mx.set_ylabel("MB per rank")
    mx.set_ylim(0, max(BEFORE_MB, float(peak.max())) * 1.12)
    mx.set_title("memory per rank; one shared evaluation (wall)", fontsize=9)
    mx.legend(fontsize=7, **legend)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="fewer rounds (VGG: 1 warm-up + 2 timed; "
                   "LeNet: 2 + 5)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--models", nargs="+", choices=sorted(MODELS), default=None)
    p.add_argument("--ranks", nargs="+", type=int, default=[8, 25])
    p.add_argument("--algorithms", nargs="+", choices=("teleportation", "dsgd"),
                   default=["teleportation", "dsgd"])
    p.add_argument("--device", choices=("cpu", "cuda", "both"), default="cpu")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default by model)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up rounds (default by model)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per mpirun")
    p.add_argument("--force", action="store_true", help="run even when the ranks would not "
                   "fit into the available memory")
    p.add_argument("--data-dir", default=None, help="use these data files instead of fake ones")
    p.add_argument("--full-size", action="store_true", help="fake Fashion-MNIST of the real "
                   "size (60,000 + 10,000 images, IDX) instead of the small one, so the memory "
                   "figures are those of the real data set (CIFAR-10 stays small); writes "
                   "bench_networks_full.*")
    p.add_argument("--python", nargs="+", default=[sys.executable], metavar="PY",
                   help="interpreters to run the ranks with, one pass each (e.g. one whose "
                   "torch is a CPU-only build; the mpirun beside it is used); default: this one")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    p.add_argument("--replot", metavar="JSON", help="redraw the PNG (and reprint the table) "
                   "from a results JSON, running nothing")
    args = p.parse_args(argv)
    if args.worker:
        return worker(args)
    if args.replot:
        meta = json.loads(Path(args.replot).read_text())
        rows = meta["rows"]
        print(table(rows))
        plot(rows, Path(args.replot).with_suffix(".png"), meta.get("title", "bench_networks"))
        print(f"wrote {Path(args.replot).with_suffix('.png')}")
        return 0

    models = args.models or ["lenet", "vgg"]
    devices = ["cpu", "cuda"] if args.device == "both" else [args.device]
    notes = []
    if "cuda" in devices and not cuda_available():
        devices = [d for d in devices if d != "cuda"]
        notes.append("GPU: no CUDA device visible on this machine; the --device cuda rows "
                     "were skipped (same code path: --device cuda, host staging).")
        print("bench_networks: " + notes[-1], file=sys.stderr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "bench_networks" + ("_full" if args.full_size else "") + ("_quick" if args.quick else "")
    rows = []
    tmp = tempfile.mkdtemp(prefix="bench_networks_data_")
    try:
        data_dir = args.data_dir
        if data_dir is None:
            if args.full_size:
                write_fake_fashion_mnist(Path(tmp))
            else:
                write_fake_fashion_mnist(Path(tmp), n_train=1000, n_test=200)
            write_fake_cifar(tmp)
            data_dir = tmp
        for python, device, model, ranks in ((py, d, m, n) for py in args.python
                                             for d in devices for m in models
                                             for n in args.ranks):
            need, have = ranks * rank_memory_mb(model), mem_available_mb()
            if device == "cpu" and have is not None and need > 0.85 * have and not args.force:
                notes.append(f"{model} x {ranks} ranks ({device}) skipped: needs about "
                             f"{need / 1024:.1f} GB of memory ({ranks} x "
                             f"{rank_memory_mb(model):.0f} MB), {have / 1024:.1f} GB "
                             "available (--force runs it anyway)")
                print("bench_networks: " + notes[-1], file=sys.stderr, flush=True)
                continue
            got = launch(model, ranks, args, data_dir, device, python)
            if got is None:
                notes.append(f"{model} x {ranks} ranks ({device}) failed")
                continue
            rows += got
            print(table(got).split("\n", 2)[-1], flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if not rows:
        print("bench_networks: no results", file=sys.stderr)
        return 1
    print()
    print(table(rows))
    verdict = all(r["pass"] for r in rows)
    print(f"\ntarget: framework time < {100 * TARGET_FRAMEWORK:.0f}% of a round: "
          f"{'PASS' if verdict else 'FAIL'} ({sum(r['pass'] for r in rows)}/{len(rows)} rows)")
    for n in notes:
        print("note: " + n)
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    meta = {
        "target_framework_fraction": TARGET_FRAMEWORK,
        "pass": verdict,
        "quick": args.quick,
        "batch_size": BATCH, "lr": LR, "momentum": MOMENTUM, "topology": "ring",
        "data": "fake data in the real on-disk formats" if args.data_dir is None else args.data_dir,
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "notes": notes,
        "title": f"Network problems under MPI, {os.cpu_count()} cores, batch {BATCH}, ring, "
                 f"framework target < {100 * TARGET_FRAMEWORK:.0f}%",
        "rows": rows,
    }
    (out / f"{stem}.json").write_text(json.dumps(meta, indent=2) + "\n")
    plot(rows, out / f"{stem}.png", meta["title"])
    print(f"wrote {out / (stem + '.csv')}, .json, .png")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
