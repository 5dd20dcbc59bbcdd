"""Optimizers beyond SGD, given as PyTorch users give them, whose state travels with the
token (mpi_teleport/DESIGN.md §2.6).

``optimizer=`` takes any ``torch.optim.Optimizer`` (``torch.optim.Adadelta``, a third-party
subclass, ...) as the class, a factory with its keywords (``functools.partial(torch.optim.AdamW, lr=1e-3,
weight_decay=0.05)``, a lambda over the parameters) or an instance a plain script built
(``torch.optim.AdamW(model.parameters(), lr=1e-3)``). Its hyperparameters are read once
(:func:`from_torch`); the package never steps a torch optimizer. SGD becomes the
momentum (heavy-ball or Nesterov) the algorithms already carry (its weight decay:
:class:`SgdDecay`); Adam and AdamW become
:class:`Adam`, a step rule whose per-token state (first and second moments, 2 d values)
travels with the token exactly as momentum does: from holder to holder along the
token's self-edge, never averaged by gossip, kept in place for DSGD's replicas, and
checkpointed with x. The step count is a pure function of the round (every token takes
one step per round: step t + 1 at round t), so a resumed run needs nothing more.

Every other optimizer becomes a :class:`TorchRule`: torch's own ``step()`` applied to each
token row, on tensors shaped like the model's trainable parameters (views into the row),
its per-parameter state tensors held in the token's state slots (one d-long slot per
state entry: Adadelta's ``square_avg`` and ``acc_delta``, RMSprop's ``square_avg``, ...)
and its step counts set from the round. The scalar hyperparameters stay the user's; the
step size is the round's ``lr``. What a token cannot carry is refused in one line:
state that is not per-parameter tensors shaped like their parameter or step counts
(factored or global state), an optimizer that needs a closure (LBFGS).

:func:`adam_step` is element-wise in the token's dtype (scalars rounded to it once), so a
rank stepping its one row and the simulator stepping k rows compute the same bits.
"""
from __future__ import annotations

import copy
import math
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UsageError

__all__ = ["Adam", "SgdDecay", "TorchRule", "from_torch", "adam_step", "decay_gradient"]


@dataclass(frozen=True)
class Adam:
    """Adam (``decoupled=False``: L2 weight decay added to the gradient) or AdamW
    (``decoupled=True``: the parameters shrink by ``lr * weight_decay`` each step), as
    ``torch.optim.Adam``/``AdamW`` compute them. ``trainable``: decay applies to the
    first ``trainable`` entries of a token (a TorchProblem's parameters, not its
    normalisation buffers); None: to all."""

    betas: tuple[float, ...] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    trainable: int | None = None

    slots = 2  # state vectors per token: first and second moments

    @property
    def name(self) -> str:
        return "AdamW" if self.decoupled else "Adam"

    def describe(self) -> str:
        """For manifests and the start-up agreement (trainable slots are the problem's)."""
        return (f"{self.name}(betas=({float(self.betas[0])!r}, {float(self.betas[1])!r}), "
                f"eps={float(self.eps)!r}, weight_decay={float(self.weight_decay)!r})")


@dataclass(frozen=True)
class SgdDecay:
    """``torch.optim.SGD(weight_decay=...)``: ``weight_decay * x`` added to the gradient
    of the first ``trainable`` entries (after any clipping, as torch steps after
    ``clip_grad_norm_``), then SGD with the run's (heavy-ball or Nesterov) momentum."""

    weight_decay: float
    momentum: float = 0.0
    nesterov: bool = False
    trainable: int | None = None

    name = "SGD"

    @property
    def slots(self) -> int:
        return 1 if self.momentum > 0 else 0

    def describe(self) -> str:
        return (f"SGD(momentum={float(self.momentum)!r}, nesterov={self.nesterov}, "
                f"weight_decay={float(self.weight_decay)!r})")


def decay_gradient(g: np.ndarray, x: np.ndarray, weight_decay: float,
                   trainable: int | None) -> None:
    """g += weight_decay * x on the trainable entries (torch's L2 term), in g's dtype."""
    n = g.shape[-1] if trainable is None else min(int(trainable), g.shape[-1])
    g[..., :n] += g.dtype.type(weight_decay) * x[..., :n]


# Elements per pass of :func:`adam_step` (as algorithms.BLOCK): its temporaries stay a
# block long (a few MiB however large the model), and each element's operations are
# those of one pass over the whole vector.
BLOCK = 1 << 18


def adam_step(rule: Adam, g: np.ndarray, x: np.ndarray, v: np.ndarray, lr: float,
              step: int) -> None:
    """y = x - Adam's update, written over ``g`` (the gradient rows, ``out`` of the local
    step); ``v`` (rows of 2 d: first moments, then second moments) updated in place.
    ``step``: the token's step count, 1 at its first step. torch's formulas::

        g += wd x                          (Adam; AdamW instead shrinks x by 1 - lr wd)
        m += (1 - b1) (g - m)              (torch's lerp)
        s = b2 s + (1 - b2) g g
        y = x - (lr / (1 - b1^step)) m / (sqrt(s) / sqrt(1 - b2^step) + eps)
    """
    d = g.shape[-1]
    n = d if rule.trainable is None else min(int(rule.trainable), d)
    for a in range(0, d, BLOCK):
        b = min(a + BLOCK, d)
        _adam_block(rule, g[..., a:b], x[..., a:b], v[..., a:b], v[..., d + a:d + b], lr, step,
                    max(0, min(n, b) - a))


def _adam_block(rule: Adam, g: np.ndarray, x: np.ndarray, m: np.ndarray, s: np.ndarray,
                lr: float, step: int, n: int) -> None:
    """:func:`adam_step` on one block of columns, its first ``n`` trainable."""
    dt = g.dtype.type
    b1, b2 = float(rule.betas[0]), float(rule.betas[1])
    wd = float(rule.weight_decay)
    if wd and not rule.decoupled:
        decay_gradient(g, x, wd, n)
    m += (g - m) * dt(1.0 - b1)
    s *= dt(b2)
    s += (g * g) * dt(1.0 - b2)
    step_size = lr / (1.0 - b1 ** step)
    denom = np.sqrt(s)
    denom /= dt(math.sqrt(1.0 - b2 ** step))
    denom += dt(rule.eps)
    update = m / denom
    update *= dt(step_size)
    if wd and rule.decoupled:
        np.multiply(x[..., :n], dt(1.0 - lr * wd), out=g[..., :n])
        g[..., :n] -= update[..., :n]
        np.subtract(x[..., n:], update[..., n:], out=g[..., n:])
    else:
        np.subtract(x, update, out=g)


def from_torch(optimizer: Any, trainable: int | None = None,
               shapes: Any = None) -> dict[str, Any]:
    """What ``optimizer=`` (a torch optimizer class, factory or instance) asks for:
    ``{"lr": its lr, "momentum": float, "nesterov": bool, "rule": a step rule or None}``
    (None: plain SGD with that momentum), or a one-line UsageError for what a token cannot
    carry. ``trainable``: the problem's trainable entries of a token; ``shapes``: their
    parameters' shapes in token order (a TorchProblem's ``param_shapes``), which a
    :class:`TorchRule` steps them as."""
    torch = torch_module()
    opt = _instance(optimizer, torch)
    groups = [{k: v for k, v in g.items() if k not in ("params", "initial_lr")}
              for g in opt.param_groups]
    name = type(opt).__name__
    if any(repr(g) != repr(groups[0]) for g in groups[1:]):
        raise UsageError(f"optimizer={name}: its parameter groups differ; a token "
                         "is stepped with one setting (use one group)")
    h = groups[0]
    if "lr" not in h:
        raise UsageError(f"optimizer={name}: its parameter group has no 'lr'; the run's step "
                         "size is set through it")
    lr = float(h["lr"])
    plain = not h.get("maximize") and not h.get("capturable") and not h.get("differentiable")
    own = ((type(opt) in (torch.optim.Adam, torch.optim.AdamW) and not h.get("amsgrad")
            and not isinstance(h["lr"], torch.Tensor))
           or (type(opt) is torch.optim.SGD and not h.get("dampening"))) and plain
    stepped = [key for g in opt.param_groups for p in g["params"] for key in opt.state.get(p, {})]
    if own and stepped:  # (Adam and SGD make their state at their first step: a state is one)
        raise UsageError(f"optimizer={name}: it was stepped already (its state holds "
                         f"{', '.join(sorted(set(stepped)))}); pass it as built, before any "
                         f"step(), or as its class or a factory")
    if type(opt) in (torch.optim.Adam, torch.optim.AdamW) and plain and not h.get("amsgrad") \
            and not isinstance(h["lr"], torch.Tensor):
        decoupled = type(opt) is torch.optim.AdamW or bool(h.get("decoupled_weight_decay"))
        rule: Any = Adam(tuple(float(b) for b in h["betas"]), float(h["eps"]),
                         float(h["weight_decay"]), decoupled, trainable)
        return {"lr": lr, "momentum": 0.0, "nesterov": False, "rule": rule}
    if type(opt) is torch.optim.SGD and plain and not h.get("dampening"):
        momentum, nesterov = float(h["momentum"]), bool(h["nesterov"])
        rule = (SgdDecay(float(h["weight_decay"]), momentum, nesterov, trainable)
                if h.get("weight_decay") else None)
        return {"lr": lr, "momentum": momentum, "nesterov": nesterov, "rule": rule}
    return {"lr": lr, "momentum": 0.0, "nesterov": False,
            "rule": torch_rule(opt, trainable, shapes)}


class TorchRule:
    """Any other ``torch.optim.Optimizer``, stepped by torch itself on each token row.

    A private optimizer (the user's class and hyperparameters, never the user's object)
    is pointed at the row: its parameters are views of the row's trainable entries shaped
    as the model's (``shapes``), their gradients the row's gradient, their state views of
    the row's state (``keys``: one d-long slot each, in order). Its scalar state (step
    counts, NAdam's ``mu_product``) must not depend on the gradients: it is the value
    after t steps at round t (every token steps once a round: step t + 1 at round t),
    replayed once on a one-element stand-in. At round 0 the state is the optimizer's own
    first one (Adagrad's ``initial_accumulator_value`` included); a token restored in
    elastic mode, or a fresh one of Algorithm 2's second phase, starts from zero tensors
    as momentum does. Floating buffers are not stepped (the forward pass writes them).
    Built by :func:`torch_rule`, which probes the optimizer first."""

    def __init__(self, optimizer: Any, keys: tuple[str, ...], scalars: tuple[str, ...],
                 shapes: tuple[tuple[int, ...], ...] | None, trainable: int | None,
                 initial: dict[str, Any] | None = None):
        self.optimizer, self.keys, self.scalars = optimizer, keys, scalars
        self.shapes, self.trainable = shapes, trainable
        self.initial = initial  # an optimizer that makes its state when built: key -> value
        self.name = type(optimizer).__name__
        self._lock = threading.Lock()  # (the thread back end's ranks share this rule)
        self._local = threading.local()
        self._history: list[dict[str, Any]] = [{}]  # scalar state after 0, 1, ... steps
        self._tiny: Any = None

    @property
    def slots(self) -> int:
        return len(self.keys)

    def describe(self) -> str:
        """Class and hyperparameters (the step size is the run's), for manifests and the
        start-up agreement."""
        h = self.optimizer.param_groups[0]
        shown = ", ".join(f"{k}={v!r}" for k, v in h.items()
                          if k not in ("params", "lr", "initial_lr"))
        return f"{self.name}({shown})"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TorchRule) and self.describe() == other.describe()
                and (self.keys, self.shapes, self.trainable)
                == (other.keys, other.shapes, other.trainable))

    def __hash__(self) -> int:
        return hash((self.describe(), self.keys))

    def __repr__(self) -> str:
        return f"TorchRule({self.describe()}, state={list(self.keys)})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_lock", "_local", "_tiny"):
            state.pop(key)
        state["_history"] = [{}]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock, self._local, self._tiny = threading.Lock(), threading.local(), None

    def step(self, g: np.ndarray, x: np.ndarray, v: np.ndarray, lr: float, t: int,
             settings: Any = None) -> None:
        """y = torch's step from x with gradient g, written over ``g`` (rows); ``v`` (rows
        of ``slots`` d-long slots) updated in place. ``settings``: the problem's scoped
        torch settings (threads, determinism), entered around the step."""
        t = int(t)
        scalars = self._scalars_after(t) if t > 0 else {}
        opt = getattr(self._local, "optimizer", None)
        if opt is None:  # (one working copy per thread)
            opt = self._local.optimizer = _private(self.optimizer)
        with settings if settings is not None else _nothing():
            for r in range(g.shape[0]):
                self._row(opt, g[r], x[r], v[r], lr, t, scalars)

    def _scalars_after(self, t: int) -> dict[str, Any]:
        """The scalar state after t steps, replayed on a one-element stand-in (it does not
        depend on the gradients: :func:`torch_rule` checked)."""
        if not self.scalars:
            return {}
        torch = torch_module()
        with self._lock:
            while len(self._history) <= t:
                if self._tiny is None:
                    self._tiny = _stand_in(self.optimizer, ((1,),), self.initial)
                opt, params = self._tiny
                params[0].grad = torch.ones(1)
                with torch.no_grad():
                    opt.step()
                got = opt.state[params[0]]
                self._history.append({k: copy.deepcopy(got[k]) for k in self.scalars})
            return self._history[t]

    def _row(self, opt: Any, g: np.ndarray, x: np.ndarray, v: np.ndarray, lr: float, t: int,
             scalars: dict[str, Any]) -> None:
        torch = torch_module()
        d = g.shape[-1]
        n = d if self.trainable is None else min(int(self.trainable), d)
        shapes = self.shapes if self.shapes is not None else ((n,),)
        grad = torch.from_numpy(g[:n].copy())  # (g's row becomes y)
        np.copyto(g, x)  # y starts at x; buffer entries stay as they are
        y = torch.from_numpy(g[:n])
        params, views = [], []
        state: Any = defaultdict(dict)
        for shape, off in _offsets(shapes):
            size = math.prod(shape)
            p = y[off:off + size].view(shape)
            p.grad = grad[off:off + size].view(shape)
            slots = {k: torch.from_numpy(v[j * d + off:j * d + off + size]).view(shape)
                     for j, k in enumerate(self.keys)}
            if t > 0:  # (round 0: the optimizer makes its first state itself)
                state[p] = {**slots, **{k: copy.deepcopy(c) for k, c in scalars.items()}}
            elif self.initial is not None:  # (one that makes it when built: as built)
                state[p] = _first_state(self.initial, slots)
            params.append(p)
            views.append(slots)
        group = opt.param_groups[0]
        group["params"], group["lr"] = params, lr
        opt.state = state
        try:
            opt.step()
        finally:
            group["params"], opt.state = [], defaultdict(dict)
        for p, (shape, off), slots in zip(params, _offsets(shapes), views):
            if p.data_ptr() != y[off:].data_ptr():  # (an optimizer that replaced p's data)
                y[off:off + math.prod(shape)].copy_(p.detach().reshape(-1))
            got = state[p]
            for k, view in slots.items():
                if got[k] is not view:
                    view.copy_(got[k])


def _offsets(shapes: Any) -> list[Any]:
    """(shape, offset) of each parameter in a token, in order."""
    out, off = [], 0
    for shape in shapes:
        out.append((shape, off))
        off += math.prod(shape)
    return out


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def torch_rule(opt: Any, trainable: int | None = None, shapes: Any = None) -> TorchRule:
    """A :class:`TorchRule` for the optimizer ``opt``, after probe steps on stand-in
    parameters (a 3-vector twice, with other gradients the second time, then ``shapes``)
    sort its state into per-parameter tensors and gradient-independent scalars;
    UsageError (one line) for state a token cannot carry."""
    torch = torch_module()
    name = type(opt).__name__
    if isinstance(opt, torch.optim.LBFGS):
        raise UsageError(f"optimizer={name} re-evaluates the loss through a closure at every "
                         "step; a token is stepped once a round from one gradient: use another "
                         "optimizer")
    initial = _initial_state(opt, name, torch)
    shapes = None if shapes is None else tuple(tuple(int(s) for s in shape) for shape in shapes)
    keys, scalars = _probe(opt, ((3,),), name, initial, 1.0)
    for scale, lr, what in ((-2.5, None, "gradients"), (1.0, 0.5, "step size")):
        _, again = _probe(opt, ((3,),), name, initial, scale, lr)
        for key in scalars:
            if not all(_same(a, b) for a, b in zip(scalars[key], again.get(key, []))):
                raise UsageError(f"optimizer={name}: its scalar state {key!r} depends on the "
                                 f"{what}; a token carries per-parameter tensors and scalars "
                                 "that follow the step count alone")
    if shapes:
        found, _ = _probe(opt, shapes, name, initial, 1.0)
        if found != keys:
            raise UsageError(f"optimizer={name}: its state differs between parameters "
                             f"({list(keys)} on a vector, {list(found)} on the model's); a "
                             "token carries one state layout")
    return TorchRule(_private(opt), keys, tuple(scalars), shapes, trainable, initial)


def _same(a: Any, b: Any) -> bool:
    torch = torch_module()
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.dtype == b.dtype and bool(torch.equal(a, b))
    return type(a) is type(b) and a == b


def _private(opt: Any) -> Any:
    """A copy of the optimizer with its hyperparameters and no parameters or state (the
    user's object, and the model it was built on, are never touched)."""
    clone = copy.copy(opt)
    clone.param_groups = [{k: copy.deepcopy(v) for k, v in opt.param_groups[0].items()
                           if k != "params"}]
    clone.param_groups[0]["params"] = []
    clone.state = defaultdict(dict)
    return clone


def _stand_in(opt: Any, shapes: Any, initial: dict[str, Any] | None) -> tuple[Any, list[Any]]:
    """A private copy of ``opt`` over zero parameters of ``shapes`` (with the state it makes
    when built, for one that does)."""
    torch = torch_module()
    probe = _private(opt)
    params = [torch.zeros(shape) for shape in shapes]
    probe.param_groups[0]["params"] = params
    if initial is not None:
        for p in params:
            probe.state[p] = _first_state(initial, {k: torch.zeros(p.shape) for k, (kind, _)
                                                    in initial.items() if kind == "fill"})
    return probe, params


def _initial_state(opt: Any, name: str, torch: Any) -> dict[str, Any] | None:
    """The state an optimizer makes when it is built (Adagrad's ``sum`` and ``step``), as
    key -> ("fill", a constant for tensors shaped like their parameter) or ("scalar", its
    value); None for one that makes its state at its first step (most)."""
    built = [(p, opt.state[p]) for g in opt.param_groups for p in g["params"] if opt.state.get(p)]
    if not built:
        return None
    p, state = built[0]
    initial: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor) and value.shape == p.shape \
                and (key != "step" or value.numel() > 1):
            flat = value.detach().reshape(-1)
            if flat.numel() and not bool((flat == flat[0]).all()):
                raise UsageError(f"optimizer={name}: its state {key!r} was stepped or set per "
                                 "element already; pass it as built, before any step(), or as "
                                 "its class or a factory")
            initial[key] = ("fill", float(flat[0]) if flat.numel() else 0.0)
        elif key == "step" and _number(value, torch) not in (None, 0.0):
            raise UsageError(f"optimizer={name}: it was stepped already (step="
                             f"{_number(value, torch):g}); pass it as built, before any step(), "
                             "or as its class or a factory")
        elif value is not None:
            initial[key] = ("scalar", copy.deepcopy(value))
    return initial


def _number(value: Any, torch: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return None


def _first_state(initial: dict[str, Any], slots: dict[str, Any]) -> dict[str, Any]:
    """A parameter's state as the optimizer builds it: its slots filled, scalars as built."""
    state = {}
    for key, (kind, value) in initial.items():
        if kind == "fill" and key in slots:
            state[key] = slots[key].fill_(value)
        elif kind == "scalar":
            state[key] = copy.deepcopy(value)
    return state


def _probe(opt: Any, shapes: Any, name: str, initial: dict[str, Any] | None, scale: float,
           lr: float | None = None) -> tuple[tuple[str, ...], dict[str, list[Any]]]:
    """Three steps of a private copy on zero parameters of ``shapes`` (gradients scaled by
    ``scale``; the step size times ``lr`` when given): the per-parameter state keys
    (floating tensors shaped like the parameter) and the scalar state's values after each
    step."""
    torch = torch_module()
    probe, params = _stand_in(opt, shapes, initial)
    if lr is not None:
        probe.param_groups[0]["lr"] = float(probe.param_groups[0]["lr"]) * lr
    keys: list[str] = []
    scalars: dict[str, list[Any]] = {}
    for step in (1, 2, 3):
        for i, p in enumerate(params):
            p.grad = scale * torch.linspace(0.5 * step, 1.5 + i, p.numel()).reshape(p.shape)
        try:
            with torch.no_grad():
                probe.step()
        except Exception as exc:  # noqa: BLE001  (the optimizer's own: say what it did)
            said = str(exc).splitlines()[0] if str(exc) else ""
            raise UsageError(f"optimizer={name}: its step() from a gradient alone raised "
                             f"{type(exc).__name__}: {said}; a token is stepped once a round "
                             "without a closure") from None
        strangers = [k for k in probe.state if not any(k is p for p in params)]
        if strangers:
            raise UsageError(f"optimizer={name}: it keeps state that is not per parameter "
                             f"({strangers[0]!r}); a token carries only per-parameter state")
        for p in params[:1]:
            for key, value in probe.state[p].items():
                if value is None:
                    continue
                if isinstance(value, torch.Tensor) and value.shape == p.shape \
                        and value.is_floating_point() and key not in scalars \
                        and (len(p.shape) or key != "step"):
                    if key not in keys:
                        keys.append(key)
                elif _number(value, torch) is not None and key not in keys:
                    scalars.setdefault(key, []).append(copy.deepcopy(value))
                else:
                    what = (f"a tensor of shape {tuple(value.shape)}"
                            if isinstance(value, torch.Tensor) else f"a {type(value).__name__}")
                    raise UsageError(f"optimizer={name}: its state {key!r} is {what}, neither a "
                                     f"tensor shaped like its parameter {tuple(p.shape)} nor a "
                                     "scalar; a token carries only per-parameter state")
        for p in params[1:]:
            got = tuple(k for k, value in probe.state[p].items()
                        if value is not None and k in keys)
            if set(got) != set(keys):
                raise UsageError(f"optimizer={name}: its state differs between parameters "
                                 f"({sorted(keys)}, {sorted(got)}); a token carries one layout")
            for k in keys:
                if probe.state[p][k].shape != p.shape:
                    raise UsageError(f"optimizer={name}: its state {k!r} is not shaped like its "
                                     f"parameter {tuple(p.shape)} (factored state); a token "
                                     "carries per-parameter tensors")
    return tuple(keys), scalars


def torch_module() -> Any:
    """torch, imported when an optimizer needs it; UsageError (one line) without it."""
    try:
        import torch
    except ImportError:  # pragma: no cover (the nn extra)
        raise UsageError("optimizer= needs torch (pip install the package's nn extra)") from None
    return torch


def _instance(optimizer: Any, torch: Any) -> Any:
    """The optimizer itself, or the one a class or factory builds over a stand-in parameter
    (only its hyperparameters are read)."""
    if isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    if not callable(optimizer):
        raise UsageError(f"optimizer: expected a torch.optim optimizer (class, factory or "
                         f"instance), got {optimizer!r}")
    try:
        built = optimizer([torch.zeros(1, requires_grad=True)])
    except Exception as exc:  # noqa: BLE001  (the user's factory: say what it did)
        raise UsageError(f"optimizer: calling it with the parameters raised "
                         f"{type(exc).__name__}: {exc}") from None
    if not isinstance(built, torch.optim.Optimizer):
        raise UsageError(f"optimizer: the factory returned {type(built).__name__}, not a "
                         "torch.optim optimizer")
    return built
