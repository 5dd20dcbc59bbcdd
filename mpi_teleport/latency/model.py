"""Latency models: delta(i, j) in microseconds, from a ``--latency`` spec (pure).

    none                 no delay (default)
    const:US             delta(i, j) = US for every i != j
    mod:TAU              delta(i, j) = TAU * (|i - j| mod 24)   (the paper's Sec. 5.3)
    matrix:FILE.csv      delta(i, j) = row i, column j of an n x n CSV (sender i, receiver j)
    ...,bw:GBPS          plus a per-link bandwidth term: bytes * 8 / (GBPS * 1e9) seconds
                         (``bw:GBPS`` alone: bandwidth only). GBPS is in gigabit/s.
    ...,bw:GBPS,hosts:R  the bandwidth is that of each *host's* link (both directions), and
                         R consecutive ranks share a host (ranks 0..R-1 on host 0, ...: what
                         ``mpirun --host a:R,b:R`` places); ``hosts:A+B+C`` gives the hosts'
                         sizes in rank order instead; ``hosts:auto`` (MPI only) takes each
                         rank's host from the placement (its processor name).

The host-link model (``hosts:``): the messages that leave together (one communication
phase of a round, :func:`mpi_teleport.latency.virtual_clock.round_links`) share the links of their
hosts. A message from host a to host b (a != b) takes ``max(out[a], in[b]) * 8 / rate``,
where ``out[a]`` is every byte of the phase leaving host a for other hosts and ``in[b]``
every byte entering b from them (:class:`HostLinks`): equal messages that share a link
finish together, when the busier of their two links has carried its whole load. A link
carries one phase after the other: a message leaves no earlier than the links it crosses
are free of the earlier phases' messages, as far as its sender knows
(:meth:`LatencyModel.departure_us`; each rank's knowledge of the links' busy times travels
with its messages). Teleportation needs it: a round's next holder may have its inputs
early (from its own host) while the round's other messages still cross the link it sends
on. A message between two ranks of one host crosses no host link and costs no bandwidth
time (its latency term stays). Without ``hosts:`` every message has its links to itself, as
before: ``bytes * 8 / rate``.

Self-messages are always free. A delay above one hour per message (``MAX_DELAY_US``) or a
bandwidth below 1 kbit/s is refused: no run could wait for it. :func:`parse_spec` with ``load=False`` checks the text
only (configuration validation stays pure); with the default it also reads and checks a
matrix file.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ..errors import UsageError

MOD_BASE = 24  # the paper's mod(|i - j|, 24)
# A delay the real clock cannot sensibly wait for (one hour per message) is refused: a run
# would sit in a sleep that looks like a hang. The virtual clock could model it, but no
# network in this package's scope is that slow, so such a value is a typo (ms vs us).
MAX_DELAY_US = 3.6e9
MIN_BW_GBPS = 1e-6  # 1 kbit/s: below it a 1 MB token takes over two hours per message
CLOCKS = ("real", "virtual")
_USAGE = ("use none, const:US, mod:TAU or matrix:FILE.csv (microseconds), optionally "
          "followed by ,bw:GBPS and ,hosts:R (ranks per host)")


# --------------------------------------------------------------------------- models
@dataclass(frozen=True, eq=False)
class LatencyModel:
    """delta(i, j) in microseconds; vectorised over numpy arrays of node ids."""

    kind: str = "none"  # none, const, mod, matrix
    value_us: float = 0.0  # const: US; mod: TAU
    matrix_us: np.ndarray | None = field(default=None, repr=False)
    bw_gbps: float | None = None
    spec: str = "none"
    # hosts: the sizes of the hosts in rank order, or (R,) with ``per_host`` set: R ranks
    # on every host; None: every message has its own links (no host model)
    host_sizes: tuple[int, ...] | None = None
    per_host: bool = False
    # hosts:auto: the host of every rank, from the placement (:meth:`placed`, under MPI);
    # None with ``host_auto`` set until then
    host_ids: np.ndarray | None = field(default=None, repr=False)
    host_auto: bool = False

    @property
    def hosts(self) -> bool:
        """Whether the bandwidth is that of shared host links (``hosts:``)."""
        return self.host_sizes is not None or self.host_ids is not None or self.host_auto

    def placed(self, host_ids) -> "LatencyModel":
        """This model with rank r on host ``host_ids[r]`` (``hosts:auto`` resolved)."""
        ids = np.array(host_ids, dtype=np.int64)
        ids.setflags(write=False)
        return replace(self, host_ids=ids, host_auto=False, host_sizes=None, per_host=False)

    def host_of(self, ranks):
        """The host of each rank (``hosts:`` given), vectorised."""
        if self.host_ids is not None:
            return self.host_ids[ranks]
        sizes = self.host_sizes
        if sizes is None:
            raise ValueError("no host grouping (hosts:) in this latency model"
                             + (": hosts:auto is resolved under MPI only" if self.host_auto else ""))
        if self.per_host:
            return np.floor_divide(ranks, sizes[0])
        return np.searchsorted(np.cumsum(sizes), ranks, side="right")

    def link_slots(self, n: int) -> int:
        """The length of a rank's knowledge of the host links' busy times (``hosts:``):
        slot h is host h's link out, slot H + h its link in (H hosts of ``n`` ranks); 0
        without ``hosts:`` (no link is shared, none is ever busy)."""
        if not self.hosts or self.bw_gbps is None:
            return 0
        return 2 * (int(np.max(self.host_of(np.arange(max(n, 1))))) + 1)

    def departure_us(self, i, j, stamp, busy):
        """When i's message to j starts on the wire (``hosts:``): at its sender's clock
        ``stamp``, or later while a host link it crosses still carries an earlier phase's
        messages, as far as the sender knows (``busy``: its busy times, :meth:`link_slots`;
        one row per message when i, j are arrays). A link carries one phase after the
        other: Teleportation's next holders may start sending while the previous round's
        messages still cross the link they need (mpi_teleport/DESIGN.md §8). Within a host:
        ``stamp``."""
        src, dst = self.host_of(i), self.host_of(j)
        half = np.shape(busy)[-1] // 2
        if np.ndim(busy) == 1:
            out, into = busy[src], busy[half + dst]
        else:
            rows = np.arange(np.shape(busy)[0])
            out, into = busy[rows, src], busy[rows, half + dst]
        return np.where(np.equal(src, dst), stamp, np.maximum(stamp, np.maximum(out, into)))

    def occupy(self, busy: np.ndarray, i: int, j: int, end: float) -> None:
        """Mark, in one rank's knowledge ``busy``, the host links that i's message to j
        crosses as busy until ``end`` (its departure + :meth:`wire_us`); nothing within a
        host."""
        src, dst = int(self.host_of(i)), int(self.host_of(j))
        if src != dst:
            half = len(busy) // 2
            busy[src] = max(busy[src], end)
            busy[half + dst] = max(busy[half + dst], end)

    def host_links(self, senders, receivers, nbytes: int, n: int) -> "HostLinks":
        """The bytes over every host's link, each direction, when the messages
        senders[e] -> receivers[e] (``nbytes`` each) leave together; ``n`` ranks. Messages
        to oneself and within a host cross no host link."""
        senders, receivers = np.asarray(senders).ravel(), np.asarray(receivers).ravel()
        n_hosts = int(np.max(self.host_of(np.arange(max(n, 1))))) + 1
        src, dst = self.host_of(senders), self.host_of(receivers)
        cross = src != dst
        weight = np.full(int(cross.sum()), float(nbytes))
        return HostLinks(np.bincount(src[cross], weight, minlength=n_hosts),
                         np.bincount(dst[cross], weight, minlength=n_hosts))

    @property
    def active(self) -> bool:
        return self.kind != "none" or self.bw_gbps is not None

    @property
    def us_per_byte(self) -> float:
        return 0.0 if self.bw_gbps is None else 8e-3 / self.bw_gbps

    def base_us(self, i, j):
        """Latency term of i -> j (no self-message special case, no bandwidth)."""
        if self.kind == "mod":
            return self.value_us * (np.abs(np.subtract(i, j)) % MOD_BASE)
        if self.kind == "matrix":
            return self.matrix_us[i, j]
        return self.value_us  # const (none: 0)

    def wire_us(self, i, j, nbytes, links: "HostLinks | None" = None):
        """The bandwidth term of i -> j, microseconds: nbytes / bandwidth without
        ``hosts:``; with it, 0 within a host, else the busier of the two host links' loads
        (``links``: the phase's :class:`HostLinks`; None: this message alone) / bandwidth."""
        if not self.hosts or self.bw_gbps is None:
            return np.multiply(nbytes, self.us_per_byte)
        src, dst = self.host_of(i), self.host_of(j)
        if links is None:
            load = np.multiply(np.ones(np.shape(src)), float(nbytes))
        else:
            load = np.maximum(links.out_bytes[src], links.in_bytes[dst])
        return np.where(np.equal(src, dst), 0.0, np.multiply(load, self.us_per_byte))

    def delay_us(self, i, j, nbytes, links: "HostLinks | None" = None):
        """delta(i, j) + the bandwidth term (:meth:`wire_us`), microseconds; 0 when i == j.
        Scalars give a float; arrays an array (the same float operations either way, so the
        simulator's oracle and the MPI ranks agree bit for bit)."""
        total = self.base_us(i, j) + self.wire_us(i, j, nbytes, links)
        if np.ndim(i) == 0 and np.ndim(j) == 0:
            return 0.0 if int(i) == int(j) else float(total)
        return np.where(np.equal(i, j), 0.0, total)

    def describe(self) -> str:
        return self.spec


@dataclass(frozen=True, eq=False)
class HostLinks:
    """Bytes over each host's link in one communication phase: ``out_bytes[h]`` leave
    host h for other hosts, ``in_bytes[h]`` enter it from them
    (:meth:`LatencyModel.host_links`)."""

    out_bytes: np.ndarray
    in_bytes: np.ndarray


NONE = LatencyModel()


def _number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--latency {spec!r}: {what} must be a number, got {text!r}; {_USAGE}") from None
    if not math.isfinite(value):
        raise UsageError(f"--latency {spec!r}: {what} must be finite, got {text!r}")
    return value


def _too_long(what: str, value_us: float, spec: str) -> None:
    if value_us > MAX_DELAY_US:
        raise UsageError(f"--latency {spec!r}: {what} is {value_us:g} microseconds "
                         f"({value_us / 3.6e9:.3g} hours) per message, more than a run can "
                         f"wait for (at most {MAX_DELAY_US:g} us = 1 hour); give microseconds")


def _load_matrix(path: str, n: int | None, spec: str) -> np.ndarray:
    import warnings

    if not path:
        raise UsageError(f"--latency {spec!r}: give the CSV file, e.g. matrix:delays.csv")
    if "\0" in path:
        raise UsageError(f"--latency {spec!r}: the file name contains a NUL byte")
    try:
        p = Path(path).expanduser()
    except (RuntimeError, KeyError):
        raise UsageError(f"--latency {spec!r}: cannot expand {path.split('/')[0]} (no such "
                         f"user); give the CSV file's path") from None
    try:
        is_file = p.is_file()
    except OSError as exc:
        raise UsageError(f"--latency {spec!r}: {path!r}: {exc.strerror}") from None
    if not is_file:
        raise UsageError(f"--latency {spec!r}: file {path!r} not found; give an n x n CSV of "
                         f"microseconds (row = sender, column = receiver)")
    try:
        with warnings.catch_warnings():  # an empty file warns before it returns: say it once
            warnings.simplefilter("ignore")
            m = np.loadtxt(p, delimiter=",", dtype=np.float64, ndmin=2, comments="#")
    except (ValueError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else "unreadable"
        raise UsageError(f"--latency {spec!r}: {path} is not a numeric CSV ({first[:120]}); give "
                         f"an n x n table of microseconds, comma-separated") from None
    except OSError as exc:
        raise UsageError(f"--latency {spec!r}: cannot read {path} ({exc.strerror})") from None
    if m.size == 0:
        raise UsageError(f"--latency {spec!r}: {path} holds no numbers (empty, or comments "
                         f"only); give an n x n table of microseconds, comma-separated")
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.size == 0:
        raise UsageError(f"--latency {spec!r}: {path} is {m.shape[0]} x {m.shape[1]}, not square; "
                         f"give an n x n table (row = sender, column = receiver)")
    if n is not None and m.shape[0] != n:
        raise UsageError(f"--latency {spec!r}: {path} is {m.shape[0]} x {m.shape[1]} but there are "
                         f"{n} nodes; give an {n} x {n} table")
    if not np.isfinite(m).all():
        i, j = np.argwhere(~np.isfinite(m))[0]
        raise UsageError(f"--latency {spec!r}: {path} has a non-finite entry at row {i}, column {j}; "
                         f"all delays must be finite microseconds")
    if (m < 0).any():
        i, j = np.argwhere(m < 0)[0]
        raise UsageError(f"--latency {spec!r}: {path} has a negative delay {m[i, j]:g} at row {i}, "
                         f"column {j}; delays must be >= 0")
    m = m.copy()
    np.fill_diagonal(m, 0.0)  # self-messages are free
    if m.max() > MAX_DELAY_US:
        i, j = np.unravel_index(int(np.argmax(m)), m.shape)
        _too_long(f"{path} row {i}, column {j}", float(m[i, j]), spec)
    m.setflags(write=False)
    return m


def _hosts(value: str, n: int | None, spec: str) -> dict:
    """``hosts:R`` (R ranks on every host), ``hosts:A+B+...`` (the hosts' sizes in rank
    order) or ``hosts:auto`` (the placement, under MPI) -> LatencyModel's host fields."""
    if value.lower() == "auto":
        return {"host_auto": True}
    sizes = []
    for part in value.split("+"):
        part = part.strip()
        if not re.fullmatch(r"[0-9]+", part) or int(part) < 1:  # (isdigit() takes '²', int() does not)
            raise UsageError(f"--latency {spec!r}: hosts: takes the ranks per host (hosts:2), "
                             f"the hosts' sizes in rank order (hosts:2+3), whole numbers >= 1, "
                             f"or auto (MPI's placement); got {value!r}")
        sizes.append(int(part))
    if len(sizes) > 1 and n is not None and sum(sizes) != n:
        raise UsageError(f"--latency {spec!r}: hosts:{value} places {sum(sizes)} ranks but there "
                         f"are {n} nodes; the sizes must add up to {n}")
    return {"host_sizes": tuple(sizes), "per_host": len(sizes) == 1}


def parse_spec(spec, n: int | None = None, load: bool = True) -> LatencyModel:
    """``--latency`` text -> LatencyModel, or UsageError saying what is wrong and what to do.
    ``n`` (the number of nodes) checks a matrix's shape; ``load=False`` checks the text
    only and does not read a matrix file (the model then has no matrix)."""
    if spec is None:
        return NONE
    text = str(spec).strip()
    if not text:
        raise UsageError(f"--latency is empty; {_USAGE}")
    parts = re.split(r",(?=\s*(?:bw|hosts)\s*:)", text, flags=re.IGNORECASE)  # a path may hold commas
    model_part, extras = parts[0].strip(), [p.strip() for p in parts[1:]]
    if re.match(r"(bw|hosts)\s*:|bw ", model_part, flags=re.IGNORECASE):
        extras.insert(0, model_part)
        model_part = "none"
    terms: dict[str, str] = {}
    keys = [e.partition(":")[0].strip().lower() for e in extras]
    for key, extra in zip(keys, extras):
        if key in terms:
            raise UsageError(f"--latency {spec!r}: {key}: given {keys.count(key)} times; give it once")
        terms[key] = extra.partition(":")[2].strip()
    bw = None
    if "bw" in terms:
        bw_text = terms["bw"]
        bw = _number(bw_text, "the bandwidth (bw:GBPS, gigabit/s)", text)
        if bw <= 0:
            raise UsageError(f"--latency {spec!r}: the bandwidth must be > 0 Gbit/s, got {bw_text}")
        if bw < MIN_BW_GBPS:
            raise UsageError(f"--latency {spec!r}: a bandwidth of {bw:g} Gbit/s cannot be waited "
                             f"for (a 1 MB token would take hours); give at least {MIN_BW_GBPS:g}")
    hosts: dict = {}
    if "hosts" in terms:
        if bw is None:
            raise UsageError(f"--latency {spec!r}: hosts: groups ranks onto shared host links "
                             f"of the bandwidth bw:GBPS; give bw: too, e.g. bw:1,hosts:2")
        hosts = _hosts(terms["hosts"], n, text)
    name, sep, arg = model_part.partition(":")
    name = name.strip().lower()
    arg = arg.strip()
    if name == "none":
        if sep:
            raise UsageError(f"--latency {spec!r}: 'none' takes no value; {_USAGE}")
        return LatencyModel("none", bw_gbps=bw, spec=text, **hosts)
    if name in ("const", "mod"):
        if not sep or not arg:
            unit = "US" if name == "const" else "TAU"
            raise UsageError(f"--latency {spec!r}: give the value in microseconds, e.g. {name}:5 "
                             f"({name}:{unit})")
        what = "the delay (const:US)" if name == "const" else "tau (mod:TAU)"
        value = _number(arg, what, text)
        if value < 0:
            raise UsageError(f"--latency {spec!r}: {what} must be >= 0 microseconds, got {arg}")
        _too_long(what if name == "const" else f"the largest delay {MOD_BASE - 1} * tau",
                  value * (1 if name == "const" else MOD_BASE - 1), text)
        return LatencyModel(name, value_us=value, bw_gbps=bw, spec=text, **hosts)
    if name == "matrix":
        if not load:
            if not arg:
                raise UsageError(f"--latency {spec!r}: give the CSV file, e.g. matrix:delays.csv")
            return LatencyModel("matrix", bw_gbps=bw, spec=text, **hosts)
        return LatencyModel("matrix", matrix_us=_load_matrix(arg, n, text), bw_gbps=bw, spec=text,
                            **hosts)
    raise UsageError(f"--latency {spec!r}: unknown model {name!r}; {_USAGE}")


def check_compute_time(value) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--compute-time must be a finite number of microseconds >= 0, got {value}")


def needs_layer(spec: object, clock: str, compute_time: float | None) -> bool:
    """Whether a run needs the latency layer: any latency, the virtual clock, or a
    modelled compute time."""
    return (str(spec).strip().lower() != "none" or clock == "virtual"
            or compute_time is not None)


@dataclass(frozen=True)
class LatencySettings:
    """The latency layer: a model spec (``none``, ``const:US``, ``mod:TAU``,
    ``matrix:FILE``, ``,bw:GBPS``), the clock, and the modelled compute time. Its defaults
    are the settings table's (the rows latency, clock and compute_time of
    :data:`mpi_teleport.session.settings.SETTINGS` read them from here: written once)."""

    spec: str = "none"
    clock: str = "real"
    compute_time: float | None = None

    @property
    def active(self) -> bool:
        return needs_layer(self.spec, self.clock, self.compute_time)

    @property
    def compute_us(self) -> float:
        """The modelled compute time per local step, microseconds (0 when not modelled:
        the simulator's oracle; the MPI layer then measures each step)."""
        return self.compute_time or 0.0
