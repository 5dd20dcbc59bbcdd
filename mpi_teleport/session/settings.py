"""Every setting of a run, in one module: its flag, TOML key and Python keyword, its
default, its help text, its rule, and the objects that carry it.

Two front ends receive settings, the command line (flags over ``--config FILE.toml``)
and the Python API (flat keywords, or the option objects :class:`Records`,
:class:`Checkpoints`, :class:`Latency`); both are checked here, by the same rules with
the same words, spelt as the front end spells the setting (``--log-every`` on the
command line, ``log_every`` in Python; a :class:`~mpi_teleport.errors.Naming`), so the
two cannot drift. Every refusal is a :class:`~mpi_teleport.errors.UsageError` of one
line that says what was wrong and what to do; no wrong type reaches numpy (a traceback)
or runs silently.

* :data:`SETTINGS`: the table, a :class:`Setting` row per setting (name, default, how a
  flag or TOML value is parsed, help, rule, whether a resume must match it, whether the
  ranks must agree on it, whether config.json records it always or only when set, and
  where :class:`~mpi_teleport.session.prepare.RunSettings` carries it). Everything else is
  derived from it: the command line's flags and ``--config`` keys (:func:`coerce`,
  :func:`from_toml`), :class:`Values` (what both front ends make of their input), the rules :func:`check_values` applies (the API's
  keywords too), what a resume may change (:func:`resumable_changes`), what the ranks
  agree on (:func:`agreed`, :func:`~.runner.agreement`), what config.json records
  (:func:`mpi_teleport.session.build.record`), the check of a hand-built RunSettings (:func:`check_run`)
  and the settings reference of the manual. :func:`check_k` and
  :func:`check_checkpoints` are the rules that tie settings together.
* :class:`Records`, :class:`Checkpoints`, :class:`Latency`: the API's option groups,
  :func:`merge` joins them with the flat keywords (a setting given both ways is refused).

Pure: checks against the disk (data directory, latency matrix file, checkpoints,
writable outputs) are :mod:`mpi_teleport.session.preflight`'s and
:mod:`mpi_teleport.session.resume`'s. How to add a setting: mpi_teleport/DESIGN.md §6.1a.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import InitVar, dataclass, fields
from pathlib import Path
from typing import Any, Callable

from ..core.spec import Logging
from ..core.topology import TOPOLOGIES
from ..errors import API, CLI, Naming, UsageError  # noqa: F401  (re-exported)
from ..latency.model import LatencySettings, check_compute_time, parse_spec
from ..problems.sampling import SAMPLINGS  # noqa: F401  (the one list of choices)
from ..runtime.search import CRITERIA as K_SELECTS

RUNS = ("teleportation", "dsgd", "search")  # what runs (RunSpec.algorithm)
VARIANTS = ("overlap", "simple")  # Algorithm 3, Algorithm 1
CLOCKS = ("real", "virtual")
SEED_LIMIT = 2**63
AS_FLAG = type("AsFlag", (), {"__repr__": lambda self: "AS_FLAG"})()  # (Setting.keyword_default)




# ----------------------------------------------------------------------------- one value
def _integer(value, field: str, naming: Naming) -> int:
    """An int (numpy integers too), never a bool, a float or a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise UsageError(f"{naming.name(field)}: expected an integer, got {value!r}")
    return int(value)


def _number(value, field: str, naming: Naming) -> float:
    """A finite real number (ints and numpy floats too), never a bool or a string."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{naming.name(field)}: expected a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise UsageError(f"{naming.name(field)} must be a finite number, got {value}")
    return value


def at_least(minimum: int, why: str = ""):
    def rule(value, field, naming):
        value = _integer(value, field, naming)
        if value < minimum:
            word = f"at least {minimum}" if minimum else f">= {minimum}"
            raise UsageError(f"{naming.name(field)} must be {word}{why}, got {value}")
        return value
    return rule


def positive(value, field, naming):
    value = _number(value, field, naming)
    if value <= 0:
        raise UsageError(f"{naming.name(field)} must be > 0, got {value}")
    return value


def optional(rule):
    return lambda value, field, naming: None if value is None else rule(value, field, naming)


def non_negative(value, field, naming):
    value = _number(value, field, naming)
    if value < 0:
        raise UsageError(f"{naming.name(field)} must be >= 0, got {value}")
    return value


def seed(value, field, naming):
    value = _integer(value, field, naming)
    if not 0 <= value < SEED_LIMIT:
        raise UsageError(f"{naming.name(field)} must be in [0, 2^63), got {value}")
    return value


def momentum(value, field, naming):
    value = _number(value, field, naming)
    if not 0 <= value < 1:
        raise UsageError(f"{naming.name(field)} must be in [0, 1), got {value}")
    return value


def fraction(value, field, naming):
    """A fraction in [0, 1): 0 holds nothing out (the paper trains on the whole set)."""
    value = _number(value, field, naming)
    if not 0 <= value < 1:
        raise UsageError(f"{naming.name(field)} must be in [0, 1), got {value}")
    return value


def step_size(value, field, naming):
    """A number > 0, or (Python) a function of the round whose value at round 0 is one:
    a function returning None, a string or a negative step (gradient ascent) is refused
    before the run rather than failing or diverging inside it."""
    if callable(value) and not naming.cli:
        try:
            first = value(0)
        except Exception as exc:  # noqa: BLE001  (the user's function: say what it did)
            raise UsageError(f"{field}: the step-size function failed at round 0 "
                             f"({type(exc).__name__}: {exc})") from None
        if isinstance(first, bool) or not isinstance(first, numbers.Real) \
                or not math.isfinite(first) or first <= 0:
            raise UsageError(f"{field}: the step-size function must return a finite number "
                             f"> 0, returned {first!r} at round 0")
        return value
    if value is None or isinstance(value, (bool, str)) or not isinstance(value, numbers.Real):
        what = "a number > 0" if naming.cli else "a number > 0 or a function of the round"
        raise UsageError(f"{naming.name(field)}: expected {what}, got {value!r}")
    return positive(value, field, naming)


def flag(value, field, naming):
    if isinstance(value, bool):
        return value
    if not naming.cli and value in (0, 1) and not isinstance(value, float):
        return bool(value)
    raise UsageError(f"{naming.name(field)}: expected true or false, got {value!r}")


def choice(options: tuple, functions: bool = False):
    """One of ``options``; with ``functions`` (Python) also a callable."""
    def rule(value, field, naming):
        if functions and callable(value) and not naming.cli:
            return value
        if not isinstance(value, str) or value not in options:
            more = " or pass a function (k, t) -> W" if functions and not naming.cli else ""
            raise UsageError(f"{naming.name(field)}: unknown value {value!r}; choose one of "
                             f"{', '.join(options)}{more}")
        return value
    return rule


def latency(value, field, naming):
    if not isinstance(value, str):
        raise UsageError(f"{naming.name(field)}: expected a latency spec such as none, "
                         f"const:US or mod:TAU, got {value!r}")
    try:
        parse_spec(value, None, load=False)  # the text; a matrix file: the preflight
    except UsageError as exc:
        raise naming.retell(exc) from None
    return value


def compute_time(value, field, naming):
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise UsageError(f"{naming.name(field)}: expected a number, got {value!r}")
    value = float(value)
    try:
        check_compute_time(value)
    except UsageError as exc:
        raise naming.retell(exc) from None
    return value


def path(value, field, naming):
    """A path setting: a non-empty str or os.PathLike (checked against the system's limits
    by :func:`mpi_teleport.disk.paths.check_path`)."""
    if value is None:
        return None
    import os

    from ..disk.paths import check_path

    if not isinstance(value, (str, os.PathLike)):
        raise UsageError(f"{naming.name(field)}: expected a path, got {value!r}")
    text = os.fspath(value)
    if isinstance(text, bytes):
        raise UsageError(f"{naming.name(field)}: expected a path as text, got {value!r}")
    check_path(field, text, naming)
    return value


def file_path(value, field, naming):
    """A file's path (``--trace``): :func:`path`'s rule, an empty one refused as a file's."""
    if isinstance(value, str) and not value:
        raise UsageError(f"{naming.name(field)} is empty; give a file's path")
    return path(value, field, naming)


def betas(value, field, naming):
    """Adam's two decay rates, each in [0, 1)."""
    items = list(value) if isinstance(value, (list, tuple)) else None
    if items is None or len(items) != 2:
        raise UsageError(f"{naming.name(field)}: expected two numbers in [0, 1) "
                         f"({'B1,B2' if naming.cli else '(b1, b2)'}), got {value!r}")
    return tuple(momentum(b, field, naming) for b in items)


def threads(value, field, naming):
    """torch's intra-op threads: a whole number >= 1, or 'auto' (this rank's share of its
    host's cores); None: the problem's own (a TorchProblem: 1)."""
    if value is None or value == "auto":
        return value
    return at_least(1, " (or auto)")(value, field, naming)


# ----------------------------------------------------------------------------- the table
# --algorithm: compare = both, and a table; Algorithm 2 ('search') is asked for by --k auto
ALGORITHMS = ("compare",) + tuple(name for name in RUNS if name != "search")
PROBLEMS = ("quadratic", "digits", "fashion-mnist", "cifar10")
NETWORK_PROBLEMS = PROBLEMS[1:]
LR_SCHEDULES = ("constant", "cosine", "cosine-warmup")
DEVICES = ("auto", "cpu", "cuda")
PROGRESS = ("auto", "on", "off")
OPTIMIZERS = ("sgd", "adam", "adamw")  # torch.optim's names, as --optimizer spells them
SCHEDULER_STEPS = ("epoch", "round")  # (core.schedulers.STEPS: the API's lr_step)


def text(value, field, naming):
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise UsageError(f"{naming.name(field)}: expected a non-empty string, got {value!r}")
    return value


def optimizer_name(value, field, naming):
    """The command line's optimizer: one of the three built-in names (in any case), or
    any other name (a torch.optim class or a dotted path: checked when the run is
    resolved, :func:`mpi_teleport.problems.torch_names.resolve_class`). The API's holds the step
    rule ``optimizer=`` built (not a string)."""
    if not naming.cli and not isinstance(value, str):
        return value
    value = text(value, field, naming)
    return value.lower() if value.lower() in OPTIMIZERS else value


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: everything the package knows of one setting.

    ``name``: the TOML key, the Python keyword and config.json's key (the flag is
    ``--name`` with '_' -> '-'); ``default``: its one default; ``kind``: how a flag or
    TOML value is parsed (:func:`coerce`); ``rule``: the value's rule (type, range), spelt
    by the front end that received it; ``resume``: a resumed run must match it (it
    decides the numbers; False: a resume may change it); ``agree``: every rank must hold
    the same value (the start-up agreement); ``record``: ``"always"`` in config.json and
    a checkpoint's manifest, or ``"when set"`` (only away from its default, so records
    written before the setting existed stay the same, and an absent one reads as the
    default on resume), or ``"no"`` (another row records it: the optimizer's options are
    in the optimizer's description); ``where``: the attribute of :class:`~.prepare.RunSettings` that
    carries it (``"spec.rounds"``; a group's field, ``"logging.log_every"``, is filled from
    the values by :func:`mpi_teleport.session.build.group`), checked by
    :func:`mpi_teleport.train` on what it is handed and agreed by the ranks (``built``:
    it holds what was built of the setting,
    e.g. the optimizer's step rule: agreed, not checked by the rule);
    ``keyword_default``: the Python keyword's default where it differs from the command
    line's (``target``: none unless given; ``progress``: a bool), else the row's one
    default serves both (:func:`keyword_default`; the API's signatures read it)."""

    name: str
    default: Any
    kind: str  # int, float, str, choice, bool, k, path, problem, fails, betas, threads
    help: str
    rule: Callable | None = None
    choices: tuple = ()
    metavar: str | None = None
    resume: bool = True
    agree: bool = True
    record: str = "always"
    where: str | None = None
    built: bool = False  # RunSettings holds what was built of it (the optimizer's rule)
    keyword_default: Any = AS_FLAG  # the Python keyword's, where it differs

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


Option = Setting  # (the command line's name for a row)

SETTINGS: tuple[Setting, ...] = (
    Setting("nodes", None, "int", "number of nodes n (simulator: required; MPI: defaults to "
            "the number of ranks and must equal it)", at_least(1), metavar="N",
            where="spec.nodes"),
    Setting("algorithm", "compare", "choice", "teleportation, dsgd (Decentralized SGD), or "
            "compare: run both and print a comparison table (default)", choices=ALGORITHMS,
            resume=False, where="spec.algorithm"),  # (compared apart: compare's legs)
    Setting("variant", "overlap", "choice", "Teleportation variant: overlap = Algorithm 3, "
            "one communication phase per round (default); simple = Algorithm 1, fetch then "
            "gossip", choice(VARIANTS), VARIANTS, resume=False, where="spec.variant"),
    Setting("k", None, "k", "number of active nodes (tokens) for Teleportation, 1..n "
            "(default min(8, n)), or auto = Algorithm 2: T rounds with k = n, then T rounds "
            "running k = 1, 2, 4, ... concurrently on disjoint nodes, keeping the best "
            "(--rounds gives T); ignored by dsgd", metavar="{INT,auto}",
            resume=False, where="spec.k"),  # (k: the manifest's own, compared apart)
    Setting("k_select", "averaged", "choice", "--k auto: how Algorithm 2 picks the best "
            "candidate k, all from the problem's validation metric (quadratic: ||x - x*||^2; "
            "networks: validation accuracy): averaged = of the averaged model at the "
            "candidate's last round (default); tokens = the mean over its tokens of each "
            "token's own metric (quadratic: mean_m ||x_m - x*||^2, what --target measures); "
            "time-average = of the averaged model, averaged over the logged rounds of the "
            "candidate's phase (every round with --log-every 1; the nearest to the paper's "
            "theory criterion, a time-averaged gradient norm). summary.json reports every "
            "candidate under every criterion", choice(K_SELECTS), K_SELECTS,
            where="spec.k_select"),
    Setting("topology", "ring", "choice", "gossip topology over the k active tokens (over "
            "all n nodes for dsgd); default ring", choice(TOPOLOGIES, functions=True),
            TOPOLOGIES, where="spec.topology"),
    Setting("problem", "quadratic", "problem", "training problem: quadratic = the paper's "
            "synthetic problem (Sec. 5.1, default); digits = small CNN on scikit-learn's 8x8 "
            "digits (offline); fashion-mnist = LeNet-5; cifar10 = VGG-11 with GroupNorm; or "
            "package.module:function, your factory called as function(nodes=N, seed=S) "
            "returning a Problem", choices=PROBLEMS,
            metavar="{" + ",".join(PROBLEMS) + ",MODULE:FUNCTION}"),
    Setting("rounds", 1000, "int", "number of rounds (iterations) to run (default 1000)",
            at_least(1), metavar="T", resume=False, where="spec.rounds"),
    Setting("lr", 0.001, "float", "step size eta > 0 (default 0.001)", step_size,
            metavar="ETA", where="spec.lr"),
    Setting("momentum", 0.0, "float", "heavy-ball momentum in [0, 1); momentum travels with "
            "its token (default 0)", momentum, metavar="MU", where="spec.momentum"),
    Setting("nesterov", False, "bool", "take the momentum in Nesterov's form, as "
            "torch.optim.SGD(nesterov=True) (needs --momentum > 0)", flag, record="when set"),
    Setting("sigma2", 10.0, "float", "quadratic: stochastic-gradient noise sigma^2 >= 0 "
            "(default 10)", non_negative, metavar="S2"),
    Setting("zeta2", 10.0, "float", "quadratic: heterogeneity zeta^2 >= 0 (default 10)",
            non_negative, metavar="Z2"),
    Setting("dim", 50, "int", "quadratic: dimension d (default 50)", at_least(1), metavar="D"),
    Setting("target", 1e-3, "float", "target for rounds_to_target: error <= target for "
            "quadratic (default 1e-3), test accuracy >= target for networks (default 0.9)",
            optional(positive), where="logging.target",  # (network problems: 0.9 unless given)
            keyword_default=None),  # (the API's: no target unless given)
    Setting("stop_at_target", False, "bool", "stop as soon as a logged round reaches "
            "--target", flag, resume=False, where="logging.stop_at_target"),
    Setting("latency", LatencySettings.spec, "str", "injected network latency, microseconds: none "
            "(default), const:US, mod:TAU (delay TAU*(|i-j| mod 24), the paper's Sec. 5.3), "
            "matrix:FILE.csv (n x n, row = sender); append ,bw:GBPS for a bandwidth term "
            "(Gbit/s), and ,hosts:R to make it that of host links shared by R consecutive "
            "ranks (hosts:A+B: hosts' sizes; hosts:auto: MPI's placement). Changes time, "
            "never numbers", latency, metavar="SPEC", resume=False, where="latency.spec"),
    Setting("clock", LatencySettings.clock, "choice", "with --latency: real = really delay messages "
            "(busy-wait; faithful only while ranks <= cores, default); virtual = no waiting, a "
            "logical clock per rank gives virtual_time_s", choice(CLOCKS), CLOCKS,
            resume=False, where="latency.clock"),
    Setting("compute_time", LatencySettings.compute_time, "float", "modelled compute time per local step, "
            "microseconds, for the virtual clock (default: the measured CPU time of each "
            "gradient)", compute_time, metavar="US", resume=False,
            where="latency.compute_time"),
    Setting("epochs", None, "float", "networks: train for E epochs, the same number of "
            "samples for every method (Teleportation with k active nodes runs n/k times more "
            "rounds than DSGD); overrides --rounds", optional(positive), metavar="E"),
    Setting("batch_size", 32, "int", "networks: mini-batch size per node and round "
            "(default 32)", at_least(1), metavar="B"),
    Setting("sampling", "replacement", "choice", "networks: how a node draws its batches: "
            "replacement = with replacement, keyed by (seed, node, round) (default); epochs = "
            "shuffled passes over its share, as DataLoader(shuffle=True), keyed by (seed, "
            "node, pass): the paper's batches", choice(SAMPLINGS), SAMPLINGS),
    Setting("alpha", 0.1, "float", "networks: Dirichlet(alpha) label partition over the "
            "nodes; small = heterogeneous (default 0.1)", positive),
    Setting("val_fraction", 0.1, "float", "networks: fraction of the training set held out "
            "for validation (--k auto selects on it; default 0.1; 0: train on every sample)",
            fraction, metavar="F"),
    Setting("lr_schedule", "constant", "choice", "constant (default); cosine = cosine decay "
            "over the run; cosine-warmup = the authors' recipe (timm's CosineLRScheduler "
            "stepped once per epoch): --warmup-epochs W epochs rising linearly from 5e-5 to "
            "--lr, then a cosine over --epochs E epochs down to 1e-4 (needs --epochs)",
            choices=LR_SCHEDULES),
    Setting("warmup_epochs", 10, "int", "--lr-schedule cosine-warmup: the warm-up's epochs "
            "(default 10, the authors')", at_least(0, " (0 = no warm-up)"), metavar="W",
            record="when set"),
    Setting("eval_every", None, "int", "evaluate the model (test metrics, --target, the "
            "non-finite check) only every R rounds and at the first and last; the records "
            "between (every --log-every) carry the training loss alone. Default: every "
            "record evaluates", optional(at_least(1)), metavar="R", resume=False,
            where="logging.eval_every"),
    Setting("eval_at_start", True, "bool", "evaluate the model before the first round "
            "(round 0's record; default). --no-eval-at-start skips that evaluation (the "
            "record then carries no metric; the last round is always evaluated)", flag,
            resume=False, record="when set", where="logging.eval_at_start"),
    Setting("trace", None, "path", "write a timeline of every rank's rounds to PATH: a "
            "Chrome trace-event file, one process per rank (Perfetto, chrome://tracing), "
            "written at every checkpoint and at the end; python -m mpi_teleport.trace PATH "
            "says where the time went (default: none)", file_path, metavar="PATH", resume=False,
            record="when set", where="logging.trace"),
    Setting("data_dir", None, "path", "networks: data directory. fashion-mnist: the four "
            "files flat in DIR (as apt-get install dataset-fashion-mnist puts them) or in "
            "DIR/FashionMNIST/raw, each .gz or not; never written to (.gz files are "
            "decompressed into $MPI_TELEPORT_CACHE, default ~/.cache/mpi_teleport). Without "
            "it: ./data if it holds them, else /usr/share/datasets/fashion-mnist. cifar10: "
            "default ./data", metavar="DIR", resume=False),
    Setting("download", False, "bool", "networks: download the data set with torchvision "
            "if absent", resume=False),
    Setting("device", "auto", "choice", "networks: auto = rank r uses GPU (local rank mod "
            "GPUs) when CUDA exists, else CPU (default)", choices=DEVICES, resume=False),
    Setting("seed", 0, "int", "random seed; same seed, same numbers (default 0)", seed,
            where="spec.seed"),
    Setting("out", None, "path", "directory for config.json, metrics.jsonl, summary.json "
            "(default: write no files)", path, metavar="DIR", resume=False),  # (API: agreed as
    # the checkpoint directory it implies, as before the table)
    Setting("log_every", 10, "int", "record every R rounds (default 10; and the first and "
            "last); evaluation time is excluded from time_s", at_least(1), metavar="R",
            resume=False, where="logging.log_every"),
    Setting("progress", "auto", "choice", "progress bar on stderr: auto = when stderr is a "
            "terminal (default)", choices=PROGRESS, resume=False, agree=False,
            keyword_default=False),  # (the API's: a bool)
    Setting("checkpoint_every", 0, "int", "write a checkpoint (every token's model and "
            "momentum, the round, the metrics so far) every R rounds, plus one at the end; 0 "
            "= never (default). SIGTERM/SIGUSR1 always write a final one where a checkpoint "
            "directory is known, then exit with status 75",
            at_least(0, " (0 = no periodic checkpoints)"), metavar="R", resume=False,
            where="plan.every"),
    Setting("checkpoint_dir", None, "path", "where checkpoints go (default OUT/checkpoints; "
            "compare: one subdirectory per algorithm)", path, metavar="DIR", resume=False,
            where="plan.dir"),
    Setting("keep_checkpoints", 2, "int", "how many of the newest checkpoints to keep "
            "(default 2)", at_least(1), metavar="N", resume=False, where="plan.keep"),
    Setting("resume", None, "path", "continue from the newest complete checkpoint in DIR (a "
            "run directory, a checkpoint directory or one round-* checkpoint); settings not "
            "given are taken from the checkpoint, and the numbers equal an uninterrupted "
            "run's. auto: the run in --out (or --checkpoint-dir) if it has a checkpoint "
            "(continued; a finished one reported), else a fresh run", path, metavar="DIR",
            resume=False,
            where="plan.start", built=True),  # (the round it resumes: every rank's same)
    Setting("elastic", False, "bool", "MPI: go on with the surviving nodes when ranks die "
            "(needs ULFM: Open MPI under mpirun --with-ft ulfm, which python -m "
            "mpi_teleport.launch adds); Teleportation or DSGD, the compiled rounds "
            "(mpi_teleport/DESIGN.md §11)",
            resume=False, where="elastic"),  # (the manifest's losses, not the flag, decide who is left out)
    Setting("fail", None, "fails", "simulator: node NODE is lost at the start of round ROUND "
            "(repeatable), the numbers an elastic MPI run with that loss computes; with "
            "--spares, ids n.. name the spares' processes (waiting: the spare is gone; once "
            "it took a node over: that node dies)", metavar="NODE@ROUND", where="failures"),
    Setting("spares", 0, "int", "hot spares, with --elastic (MPI: the job has n + S ranks) "
            "or --fail (simulator): the lowest waiting spare becomes a dead node (same id, "
            "its data rebuilt, its tokens restored) and all n nodes stay in the run (default "
            "0)", at_least(0, " (0 = no hot spares)"), metavar="S",
            resume=False, where="spares"),  # (a requeued job may have other spare ranks)
    Setting("agree_every", None, "int", "with --elastic: the survivors agree that no rank "
            "died every A rounds (and at every record and checkpoint); a loss seen at an "
            "agreement takes effect at the previous one, the rounds since are redone; 0: A "
            "chosen by the run from its measured agreement cost and round time (default "
            "with --elastic or --fail; recorded as 0); 1: every round (a loss takes effect "
            "at the round it happened; the default and record of a run without them)",
            optional(at_least(0, " (0 = chosen by the run, 1 = every round)")), metavar="A",
            resume=False, where="agree_every"),  # (the checkpoint's losses say what was lost)
    # The optimizer (its step rule: mpi_teleport/DESIGN.md §2.6), as torch.optim builds it;
    # config.json and the manifest record the rule the run steps with (its describe()).
    Setting("optimizer", "sgd", "str", "the optimizer the tokens step with: sgd "
            "(with --momentum; default), adam or adamw (with --weight-decay, --betas, --eps), "
            "or any torch.optim class by name, in any case (adadelta, RMSprop), or a "
            "third-party one by its dotted path (package.module.Class), with "
            "--optimizer-args; its state travels with the token as momentum does (needs "
            "torch)", optimizer_name, metavar="NAME",
            record="when set", where="spec.optimizer", built=True),
    Setting("weight_decay", 0.0, "float", "the optimizer's weight decay >= 0 (SGD and Adam: "
            "L2 added to the gradient; AdamW: decoupled; default 0)", non_negative,
            metavar="WD", record="no"),
    Setting("betas", (0.9, 0.999), "betas", "Adam/AdamW: the moments' decay rates B1,B2 in "
            "[0, 1) (default 0.9,0.999)", betas, metavar="B1,B2", record="no"),
    Setting("eps", 1e-8, "float", "Adam/AdamW: the denominator's epsilon > 0 (default 1e-8)",
            positive, metavar="EPS", record="no"),
    Setting("threads", None, "threads", "torch problems: intra-op threads per process, N or "
            "auto (this rank's share of its host's cores); default: the problem's own (1: "
            "bit for bit the simulator's numbers)", threads, metavar="{N,auto}",
            resume=False, record="when set"),
    Setting("optimizer_args", None, "str", "the --optimizer class's keyword arguments as "
            "key=value pairs separated by commas, each value a Python literal "
            "(rho=0.95,eps=1e-6), checked against its signature; --lr is the step size",
            optional(text), metavar="K=V,...", record="when set"),
    Setting("lr_scheduler", None, "str", "a torch.optim.lr_scheduler class by name, in any "
            "case (StepLR, cosineannealinglr), or a dotted path, built on the optimizer from "
            "--lr and replayed as the step size of each round (default: none; not with "
            "--lr-schedule)", optional(text), metavar="NAME", record="when set"),
    Setting("lr_scheduler_args", None, "str", "the --lr-scheduler class's keyword arguments "
            "(step_size=1,gamma=0.7), as --optimizer-args", optional(text),
            metavar="K=V,...", record="when set"),
    Setting("lr_scheduler_interval", "epoch", "choice", "--lr-scheduler: step it once per "
            "epoch (default; needs a problem that knows its epochs) or once per round",
            choice(SCHEDULER_STEPS), SCHEDULER_STEPS, record="when set"),
    Setting("log_every_epochs", None, "int", "record at the end of every E-th epoch (the "
            "round in which the active nodes' samples complete it; and the first and last "
            "round), beside --log-every; for a problem that knows its epochs",
            optional(at_least(1)), metavar="E", resume=False, record="when set",
            where="logging.log_every_epochs"),
    Setting("eval_every_epochs", None, "int", "evaluate the model at the end of every E-th "
            "epoch (a record there) and at the first and last round, as a plain loop's "
            "test() after each epoch; the other records carry the training loss alone "
            "(with --eval-every: at both). For a problem that knows its epochs",
            optional(at_least(1)), metavar="E", resume=False, record="when set",
            where="logging.eval_every_epochs"),
)


def rows() -> tuple[Setting, ...]:
    """The table (read at each use, so a row added to :data:`SETTINGS` is seen
    everywhere)."""
    return SETTINGS


def row(name: str) -> Setting | None:
    return next((s for s in rows() if s.name == name), None)


def setting(name: str) -> Setting:
    """The row of a setting the table has (KeyError otherwise)."""
    found = row(name)
    if found is None:
        raise KeyError(name)
    return found


def defaults() -> dict:
    return {s.name: s.default for s in rows()}


def default_logging() -> Logging:
    """The logging of a :class:`~mpi_teleport.session.prepare.RunSettings` built without
    one: records every ``log_every`` rounds at the row's default, no target."""
    return Logging(log_every=setting("log_every").default)


def keyword_default(name: str) -> Any:
    """The default of a setting's Python keyword (:mod:`mpi_teleport.api`'s signatures
    read it, so it is written once, in its row): the row's default, or its
    ``keyword_default`` where the API's differs."""
    found = setting(name)
    return found.default if found.keyword_default is AS_FLAG else found.keyword_default


def unset(name: str) -> "Default":
    """A keyword's default from the table, told apart from the same value given (the
    keywords an option object may also set: :func:`merge`)."""
    return Default(keyword_default(name))


def agreed(values: dict) -> dict:
    """What every rank must hold alike of a job's settings ``values`` (its Values, named
    as the rows): the table's ``agree`` rows, for the command line's first collective
    (:func:`mpi_teleport.front.cli.fingerprint`; ``train``'s own agreement on what a
    RunSettings carries is :func:`mpi_teleport.session.runner.agreement`)."""
    return {s.name: values[s.name] for s in rows() if s.agree}


def resumable_changes() -> frozenset:
    """Settings a resumed run may change: they never change the numbers of the tokens."""
    return frozenset(s.name for s in rows() if not s.resume)


def recorded_when_set() -> dict:
    """The settings config.json and a manifest hold only away from their default, with it."""
    return {s.name: s.default for s in rows() if s.record == "when set"}


def reference(keywords: set[str] = frozenset()) -> str:  # type: ignore[assignment]
    """The manual's table of every setting (docs/reference/settings.md), written from
    :data:`SETTINGS`: flag and TOML key, the Python keyword where the API functions take
    one (``keywords``: their parameters), default, what a resume and the ranks do with it,
    whether config.json records it, and the help text."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| setting | flag, TOML key | Python keyword | default | resume | ranks | "
             "config.json | meaning |",
             "|---|---|---|---|---|---|---|---|"]
    def shown(value) -> str:
        return "none" if value is None else (
            ",".join(map(str, value)) if isinstance(value, tuple) else str(value))

    for s in rows():
        default = f"`{shown(s.default)}`"
        if s.keyword_default is not AS_FLAG and s.name in keywords:
            default += f" (Python: `{shown(s.keyword_default)}`)"
        lines.append("| " + " | ".join(cell(c) for c in (
            f"`{s.name}`", f"`{s.flag}`, `{s.name.replace('_', '-')}`",
            f"`{s.name}=`" if s.name in keywords else "-", default,
            "must match" if s.resume else "may change", "agree" if s.agree else "own",
            {"always": "always", "when set": "when set", "no": "in another"}[s.record],
            s.help)) + " |")
    return "\n".join(lines) + "\n"


def check_values(values: dict, naming: Naming) -> dict:
    """``values`` with every setting the table gives a rule checked and normalised (numpy
    numbers to Python ones), or UsageError for the first that breaks its rule."""
    out = dict(values)
    for field, value in values.items():
        setting = row(field)
        if setting is not None and setting.rule is not None:
            out[field] = setting.rule(value, field, naming)
    return out


def __getattr__(name: str):  # the table's derived views, current with the table
    if name == "RULES":
        return {s.name: s.rule for s in rows() if s.rule is not None}
    if name == "RESUMABLE_CHANGES":
        return resumable_changes()
    if name == "OPTIONS":
        return rows()
    if name == "OPTION_BY_NAME":
        return {s.name: s for s in rows()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")



def held(run, where: str):
    """The value a :class:`~.prepare.RunSettings` holds at ``where`` (``"spec.rounds"``),
    or :data:`ABSENT` when a group on the way is None (no checkpoint plan)."""
    value = run
    for part in where.split("."):
        if value is None:
            return ABSENT
        value = getattr(value, part)
    return value


ABSENT = object()


def check_run(run) -> None:
    """:func:`mpi_teleport.train`'s check of the settings it is handed (a RunSettings the
    API built, or one built by hand): every value the table places in it
    (:attr:`Setting.where`) by its rule, spelt as Python keywords, and the algorithm and
    k. UsageError (one line) for the first that breaks its rule."""
    for setting in rows():
        if setting.where is None or setting.rule is None or setting.built:
            continue
        value = held(run, setting.where)
        if value is not ABSENT:
            setting.rule(value, setting.name, API)
    spec = run.spec
    choice(RUNS)(spec.algorithm, "algorithm", API)
    if spec.algorithm == "teleportation":
        check_k(spec.k, spec.nodes, spec.algorithm, API)


# ----------------------------------------------------------------------------- together
def check_k(k, n: int, algorithm: str, naming: Naming):
    """k of a Teleportation run: an integer 1 <= k <= n ('auto' on the command line:
    Algorithm 2). DSGD ignores k."""
    if naming.cli and k == "auto":
        return k
    k = _integer(k, "k", naming)
    if k < 1:
        raise UsageError(f"{naming.name('k')} must be at least 1 (one active node), got {k}")
    if k > n and algorithm != "dsgd":
        raise UsageError(f"{naming.given('k', k)} exceeds the number of nodes {n}; choose "
                         f"1 <= k <= {n}")
    return k


def flat_settings(records, latency, checkpoints, out) -> dict:
    """The API's option groups (:class:`Records`, :class:`Latency`, :class:`Checkpoints`)
    and ``out`` as the flat settings the rules check, named as the flat keywords, in the
    order the rules check them."""
    return {"log_every": records.log_every, "eval_every": records.eval_every,
            "eval_at_start": records.eval_at_start, "trace": records.trace,
            "log_every_epochs": records.log_every_epochs,
            "eval_every_epochs": records.eval_every_epochs,
            "target": records.target, "stop_at_target": records.stop_at_target,
            "latency": latency.latency, "clock": latency.clock,
            "compute_time": latency.compute_time, "out": out,
            "checkpoint_every": checkpoints.checkpoint_every,
            "checkpoint_dir": checkpoints.checkpoint_dir,
            "keep_checkpoints": checkpoints.keep_checkpoints, "resume": checkpoints.resume}


def checkpoint_policy(values: dict) -> tuple[int, int]:
    """How often checkpoints are written and how many are kept, of checked flat settings
    (a job's :class:`Values` too)."""
    return values["checkpoint_every"], values["keep_checkpoints"]


def check_together(spec, latency: LatencySettings, naming: Naming, *, elastic: bool,
                   failures=(), mpi: bool = False, spares: int = 0,
                   spare_ranks: bool = False) -> None:
    """The rules that tie a run's settings together once the front end built them
    (UsageError, spelt as the front end spells the settings): what elastic mode (``elastic``: ``--elastic``/``--fail`` or
    their keywords) cannot do. ``mpi``: one node per rank; ``spare_ranks``: the command
    line's hot-spare ranks exist."""
    n = naming.name
    if not elastic:
        return
    if mpi and spares and not spare_ranks:
        raise UsageError("spares under MPI: the spare ranks wait outside the run, which only "
                         "the command line arranges; use mpirun -n N+S python -m "
                         "mpi_teleport.run --elastic --spares S")
    check_elastic_runs_one_k(spec.algorithm == "search", naming)
    mode = _elastic_mode(naming)
    if latency.active:
        raise UsageError(f"{mode} does not run under the latency layer; drop "
                         f"{n('latency')}/{n('clock')}/{n('compute_time')}")
    check_fail_plan(bool(failures), mpi, naming)


def _elastic_mode(naming: Naming) -> str:
    return f"elastic mode ({naming.name('elastic')}, {naming.name('fail')})"


def check_spares(spares: int, elastic: bool, fail: bool, naming: Naming) -> None:
    """Hot spares take over dead nodes: only in elastic mode (MPI) or beside the
    simulator's failure plan."""
    if spares and not (elastic or fail):
        if naming.cli:
            raise UsageError("--spares needs --elastic (MPI) or --fail (the simulator's "
                             "failure plan)")
        raise UsageError("spares= needs elastic=True (MPI) or fail= (the simulator's failure "
                         "plan)")


def check_fail_plan(fail: bool, mpi: bool, naming: Naming) -> None:
    """The failure plan is the simulator's: under MPI, elastic mode detects losses."""
    if fail and mpi:
        raise UsageError(f"{naming.name('fail')} is the simulator's failure plan; under MPI, "
                         f"{naming.name('elastic')} detects lost ranks itself")


def check_elastic_runs_one_k(search: bool, naming: Naming) -> None:
    """Elastic mode runs Teleportation or DSGD with a chosen k, not Algorithm 2."""
    if search:
        raise UsageError(f"{_elastic_mode(naming)} runs Teleportation or DSGD, not "
                         f"{'--k auto' if naming.cli else 'search_k'}; choose k")


def check_checkpoints(values: dict, naming: Naming, search: bool = False) -> None:
    """Checkpoint settings that only make sense together: periodic checkpoints need a
    place to write; Algorithm 2 takes none."""
    every, resume = values.get("checkpoint_every") or 0, values.get("resume")
    if search and (every or resume is not None):
        which = "resume" if resume is not None else "checkpoint_every"
        k_auto = naming.given("k", "auto") if naming.cli else "search_k"
        raise UsageError(f"{naming.name(which)} is not supported with {k_auto} (Algorithm 2 "
                         f"runs 2T rounds, usually short); choose k, or run the search without "
                         f"checkpoints")
    if every and values.get("out") is None and values.get("checkpoint_dir") is None:
        if naming.cli:
            raise UsageError("--checkpoint-every needs a place to write: give --out DIR "
                             "(checkpoints go to DIR/checkpoints) or --checkpoint-dir DIR")
        raise UsageError("checkpoint_every needs a place to write: give out=DIR (checkpoints "
                         "go to DIR/checkpoints) or checkpoint_dir=DIR")


def _values(held: dict, naming: Naming) -> "Values":
    return Values(held, naming)


class Values(Mapping):
    """The checked settings of one job or call, named as the table's rows: what both
    front ends make of their input, and what :func:`mpi_teleport.session.prepare.prepare`
    turns into a run's :class:`~mpi_teleport.session.prepare.RunSettings` with the problem.

    The command lines' (:func:`mpi_teleport.front.cli.from_args`: flags over a TOML file
    over the defaults) hold every row; the Python API's (the keywords of
    :func:`mpi_teleport.teleportation` and its kin,
    :func:`mpi_teleport.session.api_checks.checked`) hold the rows it takes, and there
    ``optimizer`` is the step rule ``optimizer=`` built. Frozen: ``values.lr`` reads a
    row (one not held: its default), ``values["lr"]`` and ``"lr" in values`` what is
    held, :meth:`to_dict` all of it, :meth:`replace` makes a changed copy. ``naming``: how
    its front end spells a setting in messages (``--log-every`` or ``log_every``)."""

    __slots__ = ("_values", "naming")
    _values: dict
    naming: Naming

    def __init__(self, held: Any = (), naming: Naming = CLI) -> None:
        held = dict(held)
        unknown = set(held) - {s.name for s in rows()}
        if unknown:
            raise TypeError(f"Values: unknown setting {sorted(unknown)[0]!r}")
        object.__setattr__(self, "_values", held)
        object.__setattr__(self, "naming", naming)

    @classmethod
    def of_job(cls, given: Any = ()) -> "Values":
        """A command-line job's values: every row, at its default unless ``given``."""
        return cls({**defaults(), **dict(given)}, CLI)

    def __getattr__(self, name: str) -> Any:
        held = object.__getattribute__(self, "_values")
        if name in held:
            return held[name]
        found = row(name)
        if found is None:
            raise AttributeError(f"Values has no setting {name!r}")
        return found.default

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Values) and other._values == self._values
                and other.naming == self.naming)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values)))

    def __repr__(self) -> str:
        return "Values(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def __reduce__(self):  # (pickle, copy: rebuilt through __init__, it being frozen)
        return (_values, (dict(self._values), self.naming))

    def to_dict(self) -> dict:
        return dict(self._values)

    def replace(self, **changes: Any) -> "Values":
        return Values({**self._values, **changes}, self.naming)


def coerce(opt: Option, value, source: str):
    """Parse one raw value (a string from the command line or a TOML value)."""
    where = f"{opt.flag} (from {source})" if source != "command line" else opt.flag
    try:
        if opt.kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if opt.kind == "float":
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if opt.kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if opt.kind == "k":
            if isinstance(value, str) and value.lower() == "auto":
                return "auto"
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if opt.kind == "problem":
            value = str(value)
            module, sep, function = value.partition(":")
            if value in opt.choices or (sep and module and function
                                        and all(p.isidentifier() for p in module.split("."))
                                        and function.isidentifier()):
                return value
            raise UsageError(f"{where}: unknown value {value!r}; choose one of "
                             f"{', '.join(opt.choices)}, or give package.module:function")
        if opt.kind == "betas":  # B1,B2 (TOML: a list too)
            items = value if isinstance(value, (list, tuple)) else str(value).split(",")
            if len(items) != 2 or any(isinstance(b, bool) for b in items):
                raise ValueError
            return tuple(float(b) for b in items)
        if opt.kind == "threads":
            if isinstance(value, str) and value.strip().lower() == "auto":
                return "auto"
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if opt.kind == "fails":  # NODE@ROUND strings (the flag repeats; TOML: a list)
            from ..elastic.survivors import parse_failures

            items = value if isinstance(value, (list, tuple)) else [value]
            parse_failures([str(v) for v in items])  # (the form; nodes: resolve)
            return tuple(str(v) for v in items)
        if opt.kind == "choice":
            value = str(value)
            if value not in opt.choices:
                raise UsageError(
                    f"{where}: unknown value {value!r}; choose one of {', '.join(opt.choices)}"
                )
            return value
        if opt.kind == "path" and value is not None and not isinstance(value, str):
            raise ValueError  # (TOML's trace = 5: a number is no file's name)
        return None if value is None else str(value)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, UsageError):
            raise
        expected = {"int": "an integer", "float": "a number", "bool": "true or false",
                    "k": "an integer or 'auto'", "threads": "an integer or 'auto'",
                    "betas": "two numbers B1,B2",
                    "path": "a path (a string)"}.get(opt.kind, "a string")
        raise UsageError(f"{where}: expected {expected}, got {value!r}") from None


_TOML_MAX_BYTES = 1 << 20  # a settings file is a few hundred bytes


def from_toml(path: str) -> dict:
    """Raw settings from a TOML file; keys may use '-' or '_'."""
    import tomllib

    try:
        p = Path(path)
        if p.is_dir():
            raise UsageError(f"--config {path}: is a directory; give a TOML file")
        if not p.exists():
            raise UsageError(f"--config: file {path!r} not found")
        if not p.is_file():
            raise UsageError(f"--config {path}: not a regular file (a FIFO, a device?); give a "
                             "TOML file")
        with open(p, "rb") as f:
            text = f.read(_TOML_MAX_BYTES + 1)
    except (OSError, ValueError) as exc:  # unreadable, a name with NUL, too long, ...
        if isinstance(exc, UsageError):
            raise
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"--config {path!r}: cannot read the file ({why})") from None
    if len(text) > _TOML_MAX_BYTES:
        raise UsageError(f"--config {path}: larger than {_TOML_MAX_BYTES >> 20} MiB, not a "
                         "settings file")
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"--config {path}: not UTF-8 text (byte 0x{text[exc.start]:02x} at "
                         f"offset {exc.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path}: not valid TOML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise UsageError(f"--config {path}: nested too deeply to read (arrays or tables "
                         "within each other); settings are flat keys") from None
    out: dict = {}
    keys: dict[str, str] = {}  # setting -> the key that gave it
    for key, value in data.items():
        name = key.replace("-", "_")
        setting = row(name)
        if setting is None:
            raise UsageError(
                f"--config {path}: unknown key {key!r}; valid keys: "
                + ", ".join(o.name.replace("_", "-") for o in rows())
            )
        if name in keys:  # (log-every and log_every: one setting given twice)
            raise UsageError(f"--config {path}: {keys[name]!r} and {key!r} are one setting "
                             f"({setting.flag}); keep one of them")
        keys[name] = key
        out[name] = coerce(setting, value, path)
    return out


def resolve(raw: dict, world_size: int | None = None, script: bool = False) -> Values:
    """Validate raw settings; ``world_size`` is the MPI size (None in the simulator). The
    rules of the run's settings are those above (the Python API's too);
    here: the command line's defaults and the settings of the built-in problems.
    ``script``: the flags of a script that runs its own problem
    (:meth:`~mpi_teleport.session.prepare.RunSettings.from_args`): no rule of the built-in
    problems applies (the problem itself says what it can do when the run is
    prepared)."""
    if world_size == 1 and raw.get("nodes") is None and raw.get("resume") is None:
        raise UsageError("only one MPI rank: launch one rank per node with mpirun -n N python -m "
                         "mpi_teleport.run (or srun -n N), or use python -m mpi_teleport.sim "
                         "--nodes N in one process; --nodes 1 runs a single node on purpose")
    given_nodes = raw.get("nodes") is not None and not raw.get("_inherited_nodes")
    raw = {name: value for name, value in raw.items() if not name.startswith("_")}
    cfg = Values.of_job(raw)
    values = {name: value for name, value in cfg.to_dict().items()
              if not (name in ("nodes", "k") and value is None)}
    cfg = cfg.replace(**check_values(values, CLI))
    if world_size is not None and cfg.spares:  # (the spare ranks hold no node)
        world_size = _nodes_beside_spares(cfg, world_size)
    if world_size is not None:
        if cfg.nodes is not None and cfg.nodes != world_size and not given_nodes:
            raise UsageError(f"--resume {cfg.resume}: the checkpoint has n={cfg.nodes} nodes but "
                             f"there are {world_size} MPI ranks; resume with mpirun -n {cfg.nodes}")
        if cfg.nodes is not None and cfg.nodes != world_size:
            raise UsageError(
                f"--nodes {cfg.nodes} does not match the {world_size} MPI ranks; "
                f"launch with mpirun -n {cfg.nodes} or drop --nodes (one rank per node)"
            )
        cfg = cfg.replace(nodes=world_size)
    if cfg.nodes is None:
        raise UsageError("--nodes is required: the number of simulated nodes, e.g. --nodes 25")
    n = cfg.nodes
    cfg = cfg.replace(k=check_k(min(8, n) if cfg.k is None else cfg.k, n, cfg.algorithm, CLI))
    network = cfg.problem in NETWORK_PROBLEMS
    if network and not script and "target" not in raw:
        cfg = cfg.replace(target=0.9)
    if (script or cfg.problem not in PROBLEMS) and "target" not in raw:
        cfg = cfg.replace(target=None)  # a user's problem: no target unless given
    cross_checks(cfg, CLI, world_size)
    if not script:
        _check_builtin_problem(cfg)
    return one_shape(cfg)  # (agree_every as the run uses and records it)


def cross_checks(cfg: Values, naming: Naming, world_size: int | None = None) -> None:
    """The rules that tie a run's settings together, one set for both front ends: the
    command lines' values (:func:`resolve`) and the training functions' keywords
    (:func:`~mpi_teleport.session.api_checks.checked`) pass through the same checks,
    each spelt by ``naming``. A row a front end does not take holds the table's default
    there (:func:`one_shape`), which every rule accepts. ``world_size``: the MPI job's
    ranks (None: the simulator, or a call whose communicator is checked later)."""
    cfg = one_shape(cfg)
    _check_optimizer(cfg, naming)
    _check_schedule(cfg, naming)
    _check_scheduler(cfg, naming)
    if cfg.eval_every is not None and cfg.k == "auto":  # (as search_k takes no eval_every)
        raise UsageError(f"{naming.name('eval_every')} is not taken by "
                         f"{naming.given('k', 'auto')}: Algorithm 2 selects k from the "
                         f"evaluated records; use {naming.name('log_every')}")
    check_checkpoints(cfg.to_dict(), naming, search=cfg.k == "auto")
    _check_elastic(cfg, world_size, naming)


def _check_builtin_problem(cfg: Values) -> None:
    """What the command lines' built-in problems cannot do (a script's own problem says
    for itself when the run is prepared)."""
    network = cfg.problem in NETWORK_PROBLEMS
    if cfg.epochs is not None and cfg.problem == "quadratic":
        raise UsageError("--epochs applies to the network problems; use --rounds for quadratic")
    if cfg.k == "auto" and network and cfg.val_fraction == 0:
        raise UsageError("--k auto selects k on a validation set: give --val-fraction F > 0 "
                         "(default 0.1), or choose k")
    if cfg.threads is not None and cfg.problem == "quadratic":
        raise UsageError(f"--threads {cfg.threads}: the quadratic problem computes with "
                         f"numpy, not torch; drop --threads")
    if (cfg.problem == "quadratic" and isinstance(cfg.optimizer, str)
            and cfg.optimizer not in OPTIMIZERS):
        raise UsageError(f"--optimizer {cfg.optimizer}: the quadratic problem computes with "
                         f"numpy; torch optimizers by name step a torch problem's parameters: "
                         f"use sgd, adam or adamw")


# The rows that build the command lines' problem (problems.ProblemSettings, less the run's
# own nodes, seed, batch size and elastic mode): the job's, not a run's; a script and a
# training function run their own problem object.
PROBLEM_ROWS = ("problem", "dim", "sigma2", "zeta2", "sampling", "alpha", "val_fraction",
                "data_dir", "download", "device")


def one_shape(values: Values) -> Values:
    """A run's values in the one shape both front ends reach: every row of the table but
    those that build the command lines' problem (the job's, not the run's; kept where
    given), a row its front end does not take at the table's default, each spelt one
    way (``progress`` as the command line's auto, on or off; a failure plan as a tuple;
    ``agree_every`` as the run uses it). So the command line's and the keywords' values
    of the same run are equal, and what is recorded of them too."""
    filled = {row.name: row.default for row in rows()
              if row.name not in values and row.name not in PROBLEM_ROWS}
    progress = values.get("progress")
    if isinstance(progress, bool):  # (the API's keyword is a bool)
        filled["progress"] = "on" if progress else "off"
    fail = values.get("fail", filled.get("fail"))
    if isinstance(fail, list):
        filled["fail"] = tuple(fail)
    if values.get("agree_every") is None:  # (the interval the run uses, as recorded)
        filled["agree_every"] = agree_interval(None, bool(values.get("elastic") or fail))
    return values.replace(**filled) if filled else values


def agree_interval(given: int | None, elastic: bool) -> int:
    """``--agree-every`` as a run uses and records it: ``given``, else 0 (the interval
    chosen by the run) in elastic mode (``elastic``: ``--elastic`` or ``--fail``) and 1
    (every boundary: a plain run agrees at none) otherwise, which a plain run has always
    recorded."""
    if given is not None:
        return given
    return 0 if elastic else 1


def field_names() -> list[str]:
    return [s.name for s in rows()]


def _check_optimizer(cfg: Values, naming: Naming) -> None:
    """The optimizer's options: each belongs to the optimizers that have it. A training
    function's ``optimizer=`` (a torch class, factory or instance: its rule) was checked
    when its rule was built; its momentum by the run's spec."""
    if not isinstance(cfg.optimizer, str):
        return
    n = naming.name
    start = defaults()
    if cfg.optimizer not in OPTIMIZERS or cfg.optimizer_args is not None:
        _check_named_optimizer(cfg, start, naming)
    if cfg.optimizer != "sgd" and cfg.momentum:
        raise UsageError(f"{n('momentum')} is SGD's; {naming.given('optimizer', cfg.optimizer)} "
                         f"keeps its own moments ({n('betas')}): drop {n('momentum')} or use "
                         f"{naming.given('optimizer', 'sgd')}")
    if cfg.nesterov and (cfg.optimizer != "sgd" or not cfg.momentum):
        raise UsageError(f"{n('nesterov')} is SGD's momentum in Nesterov's form: give "
                         f"{n('momentum')} MU > 0 (with {naming.given('optimizer', 'sgd')}, "
                         f"the default)")
    for name in ("betas", "eps"):
        if cfg.optimizer == "sgd" and getattr(cfg, name) != start[name]:
            raise UsageError(f"{n(name)} is Adam's: give {n('optimizer')} adam or adamw, or "
                             f"drop {n(name)}")


def _check_named_optimizer(cfg: Values, start: dict, naming: Naming) -> None:
    """An optimizer by name with its arguments: its options are its arguments; the class
    is found (torch imported) and the arguments bind to its signature."""
    from ..problems.torch_names import factory

    n = naming.name
    for name in ("weight_decay", "betas", "eps", "momentum", "nesterov"):
        if getattr(cfg, name) != start[name]:
            raise UsageError(f"{n(name)} is for sgd, adam and adamw without "
                             f"{n('optimizer_args')}: give {name}=... in {n('optimizer_args')} "
                             f"({naming.given('optimizer', cfg.optimizer)})")
    factory(cfg.optimizer, cfg.optimizer_args, "optimizer", lr=1.0)


def _check_scheduler(cfg: Values, naming: Naming) -> None:
    """A scheduler by name: found and its arguments bound; not beside a named schedule."""
    n = naming.name
    if cfg.lr_scheduler is None:
        for name in ("lr_scheduler_args", "lr_scheduler_interval"):
            if getattr(cfg, name) != setting(name).default:
                raise UsageError(f"{n(name)} is {n('lr_scheduler')}'s: add it, or drop "
                                 f"{n(name)}")
        return
    if cfg.lr_schedule != "constant":
        raise UsageError(f"{naming.given('lr_scheduler', cfg.lr_scheduler)} and "
                         f"{naming.given('lr_schedule', cfg.lr_schedule)} both set the step "
                         f"size: give one")
    from ..problems.torch_names import factory

    factory(cfg.lr_scheduler, cfg.lr_scheduler_args, "lr_scheduler")


def _check_schedule(cfg: Values, naming: Naming) -> None:
    """The authors' cosine-warmup schedule counts epochs: its cosine spans the epochs
    after the warm-up; the warm-up's length is its own."""
    n = naming.name
    if cfg.lr_schedule == "cosine-warmup" and cfg.epochs is None:
        raise UsageError(f"{naming.given('lr_schedule', 'cosine-warmup')} needs "
                         f"{n('epochs')} E (its cosine spans E epochs after the warm-up): "
                         f"give {n('epochs')} instead of {n('rounds')}")
    if cfg.lr_schedule != "cosine-warmup" and cfg.warmup_epochs != defaults()["warmup_epochs"]:
        raise UsageError(f"{n('warmup_epochs')} is {naming.given('lr_schedule', 'cosine-warmup')}"
                         f"'s: add it, or drop {naming.given('warmup_epochs', cfg.warmup_epochs)}")


def _nodes_beside_spares(cfg: Values, world_size: int) -> int:
    """The ranks that hold a node when ``cfg.spares`` of the job's ranks are spares."""
    if not cfg.elastic:
        raise UsageError("--spares needs --elastic (a spare takes over a rank that died, "
                         "which only elastic mode survives)")
    nodes = world_size - cfg.spares
    if nodes < 1:
        raise UsageError(f"--spares {cfg.spares} leaves no rank for the nodes of the "
                         f"{world_size} MPI ranks; launch n + {cfg.spares} ranks")
    if cfg.nodes is not None and cfg.nodes != nodes:
        raise UsageError(f"--nodes {cfg.nodes} with --spares {cfg.spares} needs "
                         f"{cfg.nodes + cfg.spares} MPI ranks, not {world_size}; launch with "
                         f"mpirun -n {cfg.nodes + cfg.spares}")
    return nodes


def _check_elastic(cfg: Values, world_size: int | None, naming: Naming) -> None:
    """Elastic mode (MPI), the simulator's failure plan and hot spares: what they cannot
    do."""
    n = naming.name
    if cfg.agree_every not in (None, 1) and not (cfg.elastic or cfg.fail):
        raise UsageError(f"{n('agree_every')} needs {n('elastic')} (it spaces elastic mode's "
                         f"agreements; the simulator accepts it beside {n('fail')}, where it "
                         f"changes nothing)")
    check_spares(cfg.spares, bool(cfg.elastic), bool(cfg.fail), naming)
    if cfg.fail:
        check_fail_plan(bool(cfg.fail), world_size is not None, naming)
        from ..elastic.survivors import parse_failures

        parse_failures(list(cfg.fail), cfg.nodes, cfg.spares, naming)
    if cfg.elastic or cfg.fail:
        check_elastic_runs_one_k(cfg.k == "auto", naming)
        if cfg.algorithm == "compare":
            flag = n("elastic") if cfg.elastic else n("fail")
            raise UsageError(f"{flag}: choose --algorithm teleportation or dsgd (compare "
                             "runs two algorithms one after the other)")


# ----------------------------------------------------------------------------- the API's option groups
_STARTS = {s.name: keyword_default(s.name) for s in rows()}  # (the option groups' fields
# start at the keywords' defaults: the table's)

@dataclass(frozen=True)
class Checkpoints:
    """Periodic checkpoints and resuming, grouped (``checkpoints=`` of the training functions).

    >>> import tempfile
    >>> from pathlib import Path
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> out = tempfile.mkdtemp()
    >>> _ = mt.teleportation(Quadratic(n=8, d=3), nodes=8, k=2, rounds=40, lr=0.1, out=out,
    ...                      checkpoints=mt.Checkpoints(checkpoint_every=20))
    >>> sorted(p.name for p in (Path(out) / "checkpoints").iterdir())
    ['round-00000020', 'round-00000040']

    ``checkpoint_every``: write one every this many rounds (0: none; a signal still writes
    one); ``checkpoint_dir``: where (default ``out/checkpoints``); ``keep_checkpoints``:
    how many to keep; ``resume``: a run, checkpoint or round-* directory to continue from.
    Each field is the flat keyword of the same name, grouped (the manual's "The training
    functions' keywords"). The older names ``every``, ``dir`` and ``keep`` still work and
    warn (DeprecationWarning)."""

    checkpoint_every: int = _STARTS["checkpoint_every"]
    checkpoint_dir: str | Path | None = _STARTS["checkpoint_dir"]
    keep_checkpoints: int = _STARTS["keep_checkpoints"]
    resume: str | Path | None = _STARTS["resume"]
    every: InitVar[int | None] = None  # (deprecated names of the fields above)
    dir: InitVar[str | Path | None] = None
    keep: InitVar[int | None] = None

    def __post_init__(self, every, dir, keep) -> None:
        _renamed(self, every=every, dir=dir, keep=keep)


@dataclass(frozen=True)
class Latency:
    """Simulated message delays and the clock they act on, grouped (``latency=``).

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> result = mt.teleportation(Quadratic(n=8, d=3), nodes=8, k=2, rounds=20, lr=0.1,
    ...     latency=mt.Latency(latency="const:100", clock="virtual", compute_time=50))
    >>> result.records[-1]["virtual_time_s"]  # 20 rounds of 50 + 100 us
    0.003

    ``latency``: the model, ``none``, ``const:US``, ``mod:TAU``, ``matrix:FILE.csv``,
    optionally ``,bw:GBPS``; ``clock``: ``real`` or ``virtual``; ``compute_time``: the
    modelled compute time per step in microseconds. Each field is the flat keyword of the
    same name, grouped. Latency changes time, never the numbers. The older name
    ``model`` still works and warns (DeprecationWarning)."""

    latency: str = _STARTS["latency"]
    clock: str = _STARTS["clock"]
    compute_time: float | None = _STARTS["compute_time"]
    model: InitVar[str | None] = None  # (the deprecated name of latency)

    def __post_init__(self, model) -> None:
        _renamed(self, model=model)


@dataclass(frozen=True)
class Records:
    """What is recorded and when, grouped (``records=`` of the training functions).

    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> seen = []
    >>> result = mt.teleportation(Quadratic(n=8, d=3), nodes=8, k=2, rounds=100, lr=0.1,
    ...     records=mt.Records(log_every=10, target=0.5,
    ...                        callback=lambda r: seen.append(r["round"])))
    >>> result.summary["rounds_to_target"], seen[:3]
    (10, [0, 10, 20])

    Each field is the flat keyword of the same name, grouped (the manual's "The training
    functions' keywords"). ``log_every``: record every this many rounds (and the first
    and last); ``target`` and
    ``stop_at_target``: the metric value that counts as reached and whether to stop
    there; ``progress``: a progress bar on stderr; ``callback(record)``: called with each
    record, a true return value stops the run; ``eval_every``: evaluate the model only
    every this many rounds (and the first and last; None: at every record), the other
    records carrying the training loss alone; ``eval_at_start``: evaluate round 0 (the
    model before any step; False: skip it); ``trace``: a path for the run's timeline
    (:mod:`mpi_teleport.trace`; None: none); ``log_every_epochs``, ``eval_every_epochs``:
    also record, and evaluate, at the end of every this many epochs, exactly where the
    active nodes' samples complete it (a problem that knows its epochs). The older names
    ``every`` and ``every_epochs`` still work and warn (DeprecationWarning)."""

    log_every: int = _STARTS["log_every"]
    target: float | None = _STARTS["target"]  # (the API's: no target unless given)
    stop_at_target: bool = _STARTS["stop_at_target"]
    progress: bool = _STARTS["progress"]  # (the API's: a bool; the command line's auto/on/off)
    callback: Callable[[dict], object] | None = None
    eval_every: int | None = _STARTS["eval_every"]
    eval_at_start: bool = _STARTS["eval_at_start"]
    trace: str | Path | None = _STARTS["trace"]
    log_every_epochs: int | None = _STARTS["log_every_epochs"]
    eval_every_epochs: int | None = _STARTS["eval_every_epochs"]
    every: InitVar[int | None] = None  # (deprecated names of log_every, log_every_epochs)
    every_epochs: InitVar[int | None] = None

    def __post_init__(self, every, every_epochs) -> None:
        _renamed(self, every=every, every_epochs=every_epochs)


# The option groups' fields before they took the names of their settings: still taken, with
# a DeprecationWarning.
RENAMED = {"every": {"Checkpoints": "checkpoint_every", "Records": "log_every"},
           "dir": {"Checkpoints": "checkpoint_dir"}, "keep": {"Checkpoints": "keep_checkpoints"},
           "model": {"Latency": "latency"}, "every_epochs": {"Records": "log_every_epochs"}}


def _renamed(group, **old) -> None:
    """Apply the deprecated field names given to an option group ``group``: each sets
    the field of the new name (a DeprecationWarning says which); given beside that field,
    a UsageError names both."""
    import warnings

    cls = type(group).__name__
    for name, given in old.items():
        if given is None:
            continue
        new = RENAMED[name][cls]
        if getattr(group, new) != _STARTS[new]:
            raise UsageError(f"{cls}({name}=...) and {cls}({new}=...) set the same setting "
                             f"({name} is its older name): give {new}=")
        warnings.warn(f"{cls}({name}=...) is now {cls}({new}=...), named as the setting; "
                      f"{name}= will be removed", DeprecationWarning, stacklevel=4)
        object.__setattr__(group, new, given)


# The flat keyword of each field: the field's own name (one name per setting).
FLAT: dict[type, dict[str, str]] = {cls: {field.name: field.name for field in fields(cls)}
        for cls in (Checkpoints, Latency, Records)}
KEYWORD = {Checkpoints: "checkpoints", Latency: "latency", Records: "records"}


class Default:
    """A keyword's default value, told apart from the same value given explicitly."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self) -> str:
        return repr(self.value)


def value(given):
    """``given``, or the default it stands for."""
    return given.value if isinstance(given, Default) else given


def merge(cls, obj, **flat):
    """One ``cls`` option object from ``obj`` (an instance or None) and the flat keywords
    ``flat`` (flat name -> the given value or a :class:`Default`). A flat keyword given
    together with ``obj`` is a UsageError naming both; a field the function has no flat
    keyword for (``Records(stop_at_target=True)`` in ``search_k``) is one if set."""
    keyword, names = KEYWORD[cls], FLAT[cls]
    if obj is None:
        return cls(**{field: value(flat[name]) for field, name in names.items() if name in flat})
    if not isinstance(obj, cls):
        raise UsageError(f"{keyword}: expected mpi_teleport.{cls.__name__}(...) or None, "
                         f"got {obj!r}")
    for field in fields(cls):
        name = names[field.name]
        if name not in flat:
            if getattr(obj, field.name) != field.default:
                raise UsageError(f"{keyword}={cls.__name__}({field.name}=...): {name} is not "
                                 f"a setting of this function")
        elif not isinstance(flat[name], Default):
            raise UsageError(f"{name}= and {keyword}={cls.__name__}({field.name}=...) set the "
                             f"same setting: give one of them")
    return obj


def merge_latency(latency, clock, compute_time) -> Latency:
    """:func:`merge` for ``latency=``, which takes a model spec (the flat keyword) or a
    :class:`Latency` object."""
    if isinstance(latency, Latency):
        return merge(Latency, latency, latency=Default("none"), clock=clock,
                     compute_time=compute_time)
    return merge(Latency, None, latency=latency, clock=clock, compute_time=compute_time)
