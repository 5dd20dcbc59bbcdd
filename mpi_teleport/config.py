"""Every setting of a run, its default, its help text and its validation.

One table, ``OPTIONS``, drives the command line, ``--config FILE.toml`` and
``config.json``, so the three can never disagree. :func:`coerce` parses one raw value
(a flag's text, a TOML value, a setting inherited from a checkpoint's manifest);
:func:`resolve` turns a mapping of them into a validated :class:`Config` or raises
:class:`UsageError` with a message that says what was wrong and what to do. The rules
themselves are :mod:`mpi_teleport.settings`', shared with the Python API. It is pure:
checks against the disk (data directory, latency matrix file, checkpoints, writable
outputs) are the preflight's (:mod:`mpi_teleport.preflight`).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .search import CRITERIA as K_SELECTS
from .settings import ALGORITHMS as RUNS
from .settings import CLI, CLOCKS, SAMPLINGS, VARIANTS, check_checkpoints, check_k, check_values
from .topology import TOPOLOGIES

# --algorithm: compare = both, and a table; Algorithm 2 ('search') is asked for by --k auto
ALGORITHMS = ("compare",) + tuple(name for name in RUNS if name != "search")
PROBLEMS = ("quadratic", "digits", "fashion-mnist", "cifar10")
NETWORK_PROBLEMS = PROBLEMS[1:]
LR_SCHEDULES = ("constant", "cosine")
DEVICES = ("auto", "cpu", "cuda")
PROGRESS = ("auto", "on", "off")


from .errors import UsageError  # noqa: E402  (re-exported: config.UsageError)


@dataclass(frozen=True)
class Option:
    name: str  # the dataclass field; the flag is --name with '_' -> '-'
    kind: str  # int, float, str, choice, bool, k, path
    help: str
    choices: tuple = ()
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Config:
    nodes: int | None = None
    algorithm: str = "compare"
    variant: str = "overlap"
    k: int | str | None = None  # None: min(8, n)
    k_select: str = "averaged"
    topology: str = "ring"
    problem: str = "quadratic"
    rounds: int = 1000
    lr: float = 0.001
    momentum: float = 0.0
    sigma2: float = 10.0
    zeta2: float = 10.0
    dim: int = 50
    target: float = 1e-3  # network problems: 0.9 (accuracy) unless given
    stop_at_target: bool = False
    latency: str = "none"
    clock: str = "real"
    compute_time: float | None = None
    epochs: float | None = None
    batch_size: int = 32
    sampling: str = "replacement"
    alpha: float = 0.1
    val_fraction: float = 0.1
    lr_schedule: str = "constant"
    eval_every: int | None = None
    data_dir: str | None = None  # None: fashion-mnist searches (problems/fashion_files.py), cifar10 ./data
    download: bool = False
    device: str = "auto"
    seed: int = 0
    out: str | None = None
    log_every: int = 10
    progress: str = "auto"
    checkpoint_every: int = 0
    checkpoint_dir: str | None = None
    keep_checkpoints: int = 2
    resume: str | None = None
    elastic: bool = False
    fail: tuple | None = None
    spares: int = 0
    agree_every: int = 1

    def to_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "Config":
        data = self.to_dict()
        data.update(changes)
        return Config(**data)


OPTIONS = (
    Option("nodes", "int", "number of nodes n (simulator: required; MPI: defaults to the "
           "number of ranks and must equal it)", metavar="N"),
    Option("algorithm", "choice", "teleportation, dsgd (Decentralized SGD), or compare: "
           "run both and print a comparison table (default)", ALGORITHMS),
    Option("variant", "choice", "Teleportation variant: overlap = Algorithm 3, one "
           "communication phase per round (default); simple = Algorithm 1, fetch then gossip",
           VARIANTS),
    Option("k", "k", "number of active nodes (tokens) for Teleportation, 1..n "
           "(default min(8, n)), or auto = Algorithm 2: T rounds with k = n, then T rounds "
           "running k = 1, 2, 4, ... concurrently on disjoint nodes, keeping the best "
           "(--rounds gives T); ignored by dsgd", metavar="{INT,auto}"),
    Option("k_select", "choice", "--k auto: how Algorithm 2 picks the best candidate k, all "
           "from the problem's validation metric (quadratic: ||x - x*||^2; networks: "
           "validation accuracy): averaged = of the averaged model at the candidate's last "
           "round (default); tokens = the mean over its tokens of each token's own metric "
           "(quadratic: mean_m ||x_m - x*||^2, what --target measures); time-average = of "
           "the averaged model, averaged over the logged rounds of the candidate's phase "
           "(every round with --log-every 1; the nearest to the paper's theory "
           "criterion, a time-averaged gradient norm). summary.json reports every candidate "
           "under every criterion", K_SELECTS),
    Option("topology", "choice", "gossip topology over the k active tokens (over all n "
           "nodes for dsgd); default ring", TOPOLOGIES),
    Option("problem", "problem", "training problem: quadratic = the paper's synthetic "
           "problem (Sec. 5.1, default); digits = small CNN on scikit-learn's 8x8 digits "
           "(offline); fashion-mnist = LeNet-5; cifar10 = VGG-11 with GroupNorm; or "
           "package.module:function, your factory called as function(nodes=N, seed=S) "
           "returning a Problem", PROBLEMS, metavar="{" + ",".join(PROBLEMS) + ",MODULE:FUNCTION}"),
    Option("rounds", "int", "number of rounds (iterations) to run (default 1000)", metavar="T"),
    Option("lr", "float", "step size eta > 0 (default 0.001)", metavar="ETA"),
    Option("momentum", "float", "heavy-ball momentum in [0, 1); momentum travels with its "
           "token (default 0)", metavar="MU"),
    Option("sigma2", "float", "quadratic: stochastic-gradient noise sigma^2 >= 0 (default 10)",
           metavar="S2"),
    Option("zeta2", "float", "quadratic: heterogeneity zeta^2 >= 0 (default 10)", metavar="Z2"),
    Option("dim", "int", "quadratic: dimension d (default 50)", metavar="D"),
    Option("target", "float", "target for rounds_to_target: error <= target for quadratic "
           "(default 1e-3), test accuracy >= target for networks (default 0.9)"),
    Option("stop_at_target", "bool", "stop as soon as a logged round reaches --target"),
    Option("latency", "str", "injected network latency, microseconds: none (default), "
           "const:US, mod:TAU (delay TAU*(|i-j| mod 24), the paper's Sec. 5.3), "
           "matrix:FILE.csv (n x n, row = sender); append ,bw:GBPS for a bandwidth term "
           "(Gbit/s), and ,hosts:R to make it that of host links shared by R consecutive "
           "ranks (hosts:A+B: hosts' sizes; hosts:auto: MPI's placement). Changes time, never "
           "numbers", metavar="SPEC"),
    Option("clock", "choice", "with --latency: real = really delay messages (busy-wait; "
           "faithful only while ranks <= cores, default); virtual = no waiting, a logical "
           "clock per rank gives virtual_time_s", CLOCKS),
    Option("compute_time", "float", "modelled compute time per local step, microseconds, "
           "for the virtual clock (default: the measured CPU time of each gradient)", metavar="US"),
    Option("epochs", "float", "networks: train for E epochs, the same number of samples "
           "for every method (Teleportation with k active nodes runs n/k times more rounds "
           "than DSGD); overrides --rounds", metavar="E"),
    Option("batch_size", "int", "networks: mini-batch size per node and round (default 32)",
           metavar="B"),
    Option("sampling", "choice", "networks: how a node draws its batches: replacement = "
           "with replacement, keyed by (seed, node, round) (default); epochs = shuffled passes "
           "over its share, as DataLoader(shuffle=True), keyed by (seed, node, pass): the "
           "paper's batches", SAMPLINGS),
    Option("alpha", "float", "networks: Dirichlet(alpha) label partition over the nodes; "
           "small = heterogeneous (default 0.1)"),
    Option("val_fraction", "float", "networks: fraction of the training set held out for "
           "validation (--k auto selects on it; default 0.1; 0: train on every sample)",
           metavar="F"),
    Option("lr_schedule", "choice", "constant (default) or cosine decay over the run",
           LR_SCHEDULES),
    Option("eval_every", "int", "networks: evaluate the averaged model on the test set "
           "every R rounds (same as --log-every)", metavar="R"),
    Option("data_dir", "path", "networks: data directory. fashion-mnist: the four files "
           "flat in DIR (as apt-get install dataset-fashion-mnist puts them) or in "
           "DIR/FashionMNIST/raw, each .gz or not; never written to (.gz files are "
           "decompressed into $MPI_TELEPORT_CACHE, default ~/.cache/mpi_teleport). Without "
           "it: ./data if it holds them, else /usr/share/datasets/fashion-mnist. cifar10: "
           "default ./data", metavar="DIR"),
    Option("download", "bool", "networks: download the data set with torchvision if absent"),
    Option("device", "choice", "networks: auto = rank r uses GPU (local rank mod GPUs) when "
           "CUDA exists, else CPU (default)", DEVICES),
    Option("seed", "int", "random seed; same seed, same numbers (default 0)"),
    Option("out", "path", "directory for config.json, metrics.jsonl, summary.json "
           "(default: write no files)", metavar="DIR"),
    Option("log_every", "int", "evaluate and log every R rounds (default 10); evaluation "
           "time is excluded from time_s", metavar="R"),
    Option("progress", "choice", "progress bar on stderr: auto = when stderr is a "
           "terminal (default)", PROGRESS),
    Option("checkpoint_every", "int", "write a checkpoint (every token's model and momentum, "
           "the round, the metrics so far) every R rounds, plus one at the end; 0 = never "
           "(default). SIGTERM/SIGUSR1 always write a final one where a checkpoint directory "
           "is known, then exit with status 75", metavar="R"),
    Option("checkpoint_dir", "path", "where checkpoints go (default OUT/checkpoints; "
           "compare: one subdirectory per algorithm)", metavar="DIR"),
    Option("keep_checkpoints", "int", "how many of the newest checkpoints to keep (default 2)",
           metavar="N"),
    Option("resume", "path", "continue from the newest complete checkpoint in DIR (a run "
           "directory, a checkpoint directory or one round-* checkpoint); settings not given "
           "are taken from the checkpoint, and the numbers equal an uninterrupted run's",
           metavar="DIR"),
    Option("elastic", "bool", "MPI: go on with the surviving nodes when ranks die (needs "
           "ULFM: Open MPI under mpirun --with-ft ulfm, which python -m mpi_teleport.launch "
           "adds); Teleportation or DSGD, per-round executor (mpi_teleport/DESIGN.md §11)"),
    Option("fail", "fails", "simulator: node NODE is lost at the start of round ROUND "
           "(repeatable), the numbers an elastic MPI run with that loss computes; with "
           "--spares, ids n.. name the spares' processes (waiting: the spare is gone; once it "
           "took a node over: that node dies)",
           metavar="NODE@ROUND"),
    Option("agree_every", "int", "with --elastic: the survivors agree that no rank died "
           "every A rounds (and at every record and checkpoint) instead of every round; a "
           "loss seen at an agreement takes effect at the previous one, the rounds since "
           "are redone (default 1)", metavar="A"),
    Option("spares", "int", "hot spares, with --elastic (MPI: the job has n + S ranks) or "
           "--fail (simulator): the lowest waiting spare becomes a dead node (same id, its "
           "data rebuilt, its tokens restored) and all n nodes stay in the run (default 0)",
           metavar="S"),
)
OPTION_BY_NAME = {o.name: o for o in OPTIONS}


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
        if opt.kind == "fails":  # NODE@ROUND strings (the flag repeats; TOML: a list)
            from .elastic import parse_failures

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
        return None if value is None else str(value)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, UsageError):
            raise
        expected = {"int": "an integer", "float": "a number", "bool": "true or false",
                    "k": "an integer or 'auto'"}.get(opt.kind, "a string")
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
    out = {}
    for key, value in data.items():
        name = key.replace("-", "_")
        if name not in OPTION_BY_NAME:
            raise UsageError(
                f"--config {path}: unknown key {key!r}; valid keys: "
                + ", ".join(o.name.replace("_", "-") for o in OPTIONS)
            )
        out[name] = coerce(OPTION_BY_NAME[name], value, path)
    return out


def resolve(raw: dict, world_size: int | None = None) -> Config:
    """Validate raw settings; ``world_size`` is the MPI size (None in the simulator). The
    rules of the run's settings are :mod:`mpi_teleport.settings`' (the Python API's too);
    here: the command line's defaults and the settings of the built-in problems."""
    if world_size == 1 and raw.get("nodes") is None and raw.get("resume") is None:
        raise UsageError("only one MPI rank: launch one rank per node with mpirun -n N python -m "
                         "mpi_teleport.run (or srun -n N), or use python -m mpi_teleport.sim "
                         "--nodes N in one process; --nodes 1 runs a single node on purpose")
    given_nodes = raw.get("nodes") is not None and not raw.get("_inherited_nodes")
    raw = {name: value for name, value in raw.items() if not name.startswith("_")}
    cfg = Config(**raw)
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
    if network and "target" not in raw:
        cfg = cfg.replace(target=0.9)
    if cfg.problem not in PROBLEMS and "target" not in raw:
        cfg = cfg.replace(target=None)  # a user's problem: no target unless given
    if cfg.eval_every is not None:
        cfg = cfg.replace(log_every=cfg.eval_every)
    if cfg.epochs is not None and cfg.problem == "quadratic":
        raise UsageError("--epochs applies to the network problems; use --rounds for quadratic")
    if cfg.k == "auto" and network and cfg.val_fraction == 0:
        raise UsageError("--k auto selects k on a validation set: give --val-fraction F > 0 "
                         "(default 0.1), or choose k")
    check_checkpoints(cfg.to_dict(), CLI, search=cfg.k == "auto")
    _check_elastic(cfg, world_size)
    return cfg


def field_names() -> list[str]:
    return [f.name for f in fields(Config)]


def _nodes_beside_spares(cfg: Config, world_size: int) -> int:
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


def _check_elastic(cfg: Config, world_size: int | None) -> None:
    """--elastic (MPI), --fail (the simulator's failure plan) and --spares: what they
    cannot do."""
    if cfg.agree_every != 1 and not (cfg.elastic or cfg.fail):
        raise UsageError("--agree-every needs --elastic (it spaces elastic mode's agreements; "
                         "the simulator accepts it beside --fail, where it changes nothing)")
    if cfg.spares and not (cfg.elastic or cfg.fail):
        raise UsageError("--spares needs --elastic (MPI) or --fail (the simulator's "
                         "failure plan)")
    if cfg.fail:
        if world_size is not None:
            raise UsageError("--fail is the simulator's failure plan; under MPI use --elastic "
                             "(lost ranks are detected)")
        from .elastic import parse_failures

        parse_failures(list(cfg.fail), cfg.nodes, cfg.spares)
    if cfg.elastic or cfg.fail:
        flag = "--elastic" if cfg.elastic else "--fail"
        if cfg.k == "auto":
            raise UsageError(f"{flag} runs Teleportation or DSGD, not --k auto; choose k")
        if cfg.algorithm == "compare":
            raise UsageError(f"{flag}: choose --algorithm teleportation or dsgd (compare "
                             "runs two algorithms one after the other)")
