"""Each implementation has every member of the Protocol it claims (mpi_teleport/
interfaces.py), and what a transport can do is declared (has_channels, has_clock), so
nothing needs probing. The latency layer forwards nothing implicitly: a collective the
MPI transport gains must be added to the protocol and to the layer (this test names it).
Serial, no MPI."""
from __future__ import annotations

import inspect
import typing

import pytest

from loopback import Hub, Loopback
from mpi_teleport.core import interfaces
from mpi_teleport.runtime.backends.local import LocalBackend
from mpi_teleport.runtime.backends.mpi import MpiBackend
from mpi_teleport.latency.layer import LatencyTransport
from mpi_teleport.runtime.metrics import Recorder
from mpi_teleport.problems.quadratic import quadratic
from mpi_teleport.runtime.search import SearchRecorder
from mpi_teleport.core.spec import RunSpec
from mpi_teleport.elastic.transport import ElasticTransport
from mpi_teleport.runtime.transport import Transport
from mpi_teleport.elastic.backend import ElasticBackend

# The MPI transport's own methods that are not part of what a back end may call: creating
# and freeing it, and the raw requests the latency layer builds on.
TRANSPORT_ONLY = {"duplicate", "free", "dup", "irecv", "isend", "testall",
                  "local_rank", "ranks_on_host", "host_ids"}  # (host_ids: hosts:auto)


def methods(protocol) -> set[str]:
    names = set()
    for cls in protocol.__mro__:
        if cls in (typing.Protocol, typing.Generic, object):
            continue
        names |= {n for n, v in vars(cls).items()
                  if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def attributes(protocol) -> set[str]:
    names = set()
    for cls in protocol.__mro__:
        names |= set(getattr(cls, "__annotations__", {}))
    return names


COLLECTIVES = {"gather_rows", "bcast_array", "gather_rows_in_order", "bcast", "gather",
               "allgather", "agree_max", "agree_max_start", "reduce_max", "barrier", "abort"}


@pytest.mark.parametrize("cls,protocol,exempt", [
    (Transport, interfaces.ChannelTransport, set()),
    (LatencyTransport, interfaces.ClockedTransport, set()),
    (Loopback, interfaces.ChannelTransport, COLLECTIVES),  # rounds only: the tests' wires
    (LocalBackend, interfaces.Backend, set()),
    (MpiBackend, interfaces.Backend, set()),
    (ElasticBackend, interfaces.Backend, set()),
    (ElasticTransport, interfaces.FaultTolerantTransport, set()),
    (Recorder, interfaces.CheckpointedRecorder, set()),
    (SearchRecorder, interfaces.RunRecorder, set()),
])
def test_implementations_have_every_method(cls, protocol, exempt):
    """Every method of the protocol is defined by the class (or, for the MPI transport's
    start/wait_all, bound per instance to mpi4py's own functions and annotated so)."""
    annotated = set(getattr(cls, "__annotations__", {}))
    missing = sorted(n for n in methods(protocol) - exempt - annotated
                     if not callable(getattr(cls, n, None))
                     and not isinstance(getattr(cls, n, None), property))
    assert not missing, f"{cls.__name__} lacks {missing} of {protocol.__name__}"


def test_transports_declare_what_they_can_do():
    assert (Transport.has_channels, Transport.has_clock) == (True, False)
    assert (LatencyTransport.has_channels, LatencyTransport.has_clock) == (False, True)
    assert (Loopback.has_channels, Loopback.has_clock) == (True, False)


def test_instances_satisfy_the_protocols():
    spec = RunSpec("teleportation", 2, 1, 4, 0.1)
    transport = Loopback(Hub(2), 0)
    for backend in (LocalBackend(quadratic(2, dim=3), spec),
                    MpiBackend(quadratic(2, dim=3), spec, transport)):
        backend.begin(spec.phases()[0], 0, quadratic(2, dim=3).initial())  # (dim needs tokens)
        assert isinstance(backend, interfaces.Backend)
        assert {"name", "layout", "root", "checks_every_round"} <= attributes(interfaces.Backend)


def test_every_transport_method_is_in_the_protocol_or_transport_only():
    """What a back end may call on the MPI transport is in TokenTransport or
    ChannelTransport, hence implemented by the latency layer too (no __getattr__)."""
    public = {n for n, v in vars(Transport).items() if not n.startswith("_") and callable(v)}
    public |= set(Transport.__annotations__) - {"has_channels", "has_clock"}
    declared = methods(interfaces.ChannelTransport)
    assert public - declared <= TRANSPORT_ONLY, (
        f"Transport has {sorted(public - declared - TRANSPORT_ONLY)}: add them to "
        f"interfaces.TokenTransport (and LatencyTransport) or to TRANSPORT_ONLY here")
    layer = methods(interfaces.TokenTransport) - {n for n in dir(LatencyTransport)}
    assert not layer, f"LatencyTransport lacks {sorted(layer)}"


def test_no_attribute_forwarding():
    for cls in (LatencyTransport, Transport, MpiBackend, LocalBackend):
        assert "__getattr__" not in vars(cls), cls
    from mpi_teleport.latency.layer import TimedProblem

    assert "__getattr__" not in vars(TimedProblem)
    assert inspect.signature(TimedProblem.gradient).parameters.keys() >= {"nodes", "x", "t", "out"}


def test_the_engine_calls_only_declared_members():
    """Elastic mode is part of the Backend protocol (the round boundary: keep, enter,
    settle, recover, join, set_handover; agree_every) and of CheckpointedRecorder
    (forget, follow, rounds_to_target): the engine calls them on every back end, so a
    plain back end has them too and nothing is probed."""
    for name in ("keep", "enter", "settle", "recover", "join", "set_handover"):
        assert name in methods(interfaces.Backend), name
    assert "agree_every" in attributes(interfaces.Backend)
    assert {"forget", "follow"} <= methods(interfaces.CheckpointedRecorder)
    assert {"record_training"} <= methods(interfaces.RunRecorder)
    assert {"progress"} <= attributes(interfaces.RunRecorder)
    assert {"settle", "shrink"} <= methods(interfaces.FaultTolerantTransport)
    assert {"index", "spares", "shrunk", "replaced"} <= attributes(interfaces.FaultTolerantTransport)


def _probes_and_bolts(path):
    """(what is probed or assigned to, where) for getattr/hasattr calls and attributes
    assigned on a caught exception."""
    import ast

    tree = ast.parse(path.read_text())
    caught = {h.name for h in ast.walk(tree) if isinstance(h, ast.ExceptHandler) and h.name}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")):
            found.append((ast.unparse(node.args[0]), f"{path.name}:{node.lineno} {ast.unparse(node)}"))
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                    if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                            and (t.value.id in caught or t.value.id == "error")):
                        found.append((t.value.id, f"{path.name}:{node.lineno} {ast.unparse(t)} ="))
    return found


def test_no_probing_of_back_ends_and_no_attributes_on_exceptions():
    """One engine loop over declared members: neither the engine, the elastic back ends
    and the spares' pool, the runner (save its look at a problem's torch settings) nor the MPI entry point
    probes with getattr/hasattr or attaches attributes to an exception."""
    from pathlib import Path

    import mpi_teleport

    root = Path(mpi_teleport.__file__).parent
    found = []
    for name in ("runtime/engine.py", "elastic/backend.py", "elastic/simulated.py",
                 "elastic/spares.py", "elastic/meeting.py", "session/runner.py", "run.py"):
        found += _probes_and_bolts(root / name)
    # (share_cores looks at a user's problem for a TorchProblem's optional torch settings)
    problems = {"problem", "getattr(problem, 'problem', problem)", "settings"}
    found = [where for probed, where in found if probed not in problems]
    assert not found, found


def test_agreed_is_a_declared_field():
    """collective.agreed sets UsageError's declared ``agreed`` field (no attribute of its
    own bolted on); NonFiniteError, Terminated and TooFewSurvivors always are agreed."""
    from mpi_teleport.errors import NonFiniteError, UsageError
    from mpi_teleport.runtime import collective
    from mpi_teleport.errors import TooFewSurvivors

    exc = UsageError("x")
    assert UsageError.agreed is False and not collective.is_agreed(exc)
    assert collective.agreed(exc) is exc and exc.agreed and collective.is_agreed(exc)
    assert set(vars(exc)) == {"agreed"}
    assert collective.is_agreed(NonFiniteError("x"))
    assert collective.is_agreed(TooFewSurvivors(3, 1, 2, root=False))
