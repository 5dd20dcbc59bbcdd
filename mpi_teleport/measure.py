"""The measurement surface: the package's internals that benchmarks time and take apart,
under one documented name (``from mpi_teleport.measure import Transport``).

The public API is :data:`mpi_teleport.__all__`; everything else in the package is
internal and may change. A benchmark measures more than the API shows: the transport's
messages, a back end's rounds, the latency layer's plan, the launcher's command line,
the command lines run in-process. This module names exactly those pieces (``__all__``),
so a change of the internals shows here, in one place, and not in every benchmark
(tests/test_layers.py holds benchmarks/ and the examples to ``mpi_teleport.__all__`` and
this ``__all__``). It is for the package's own benchmarks and for measurements like
them: the names keep their internal modules' contracts, which may change between
releases (the manual's Reference, "The measurement surface", lists them).

Each name is imported when first asked for (importing this module imports nothing else),
so a benchmark pays only for what it uses: a memory floor stays a floor.
"""
from __future__ import annotations

import importlib
from typing import Any

# name -> "module" (the module itself) or "module:attribute", grouped by layer
_NAMES = {
    # launching an MPI job (the launcher's helpers, the MPI flavour)
    "find_mpirun": "mpi_teleport.launch:find_mpirun",
    "mpi_env": "mpi_teleport.launch:mpi_env",
    "mpirun_command": "mpi_teleport.launch:mpirun_command",
    "flavor_of_launcher": "mpi_teleport.front.mpi_flavor:flavor_of_launcher",
    "Flavor": "mpi_teleport.front.mpi_flavor:Flavor",
    "OPENMPI": "mpi_teleport.front.mpi_flavor:OPENMPI",
    "OPENMPI_CROWDED": "mpi_teleport.front.mpi_flavor:OPENMPI_CROWDED",
    # the command lines, run in-process, and their settings
    "sim": "mpi_teleport.sim",
    "simulate": "mpi_teleport.sim:simulate",
    "run": "mpi_teleport.run",
    "cli": "mpi_teleport.front.cli",
    "run_spec": "mpi_teleport.front.cli:run_spec",
    "problem_of": "mpi_teleport.front.cli:problem_of",
    "settings": "mpi_teleport.session.settings",
    "resolve": "mpi_teleport.session.settings:resolve",
    "Values": "mpi_teleport.session.settings:Values",
    # the pure core: the run's spec, keyed randomness, the schedule, topologies, the plan
    "RunSpec": "mpi_teleport.core.spec:RunSpec",
    "Logging": "mpi_teleport.core.spec:Logging",
    "rng": "mpi_teleport.core.rng",
    "schedule": "mpi_teleport.core.schedule",
    "topology": "mpi_teleport.core.topology",
    "plan": "mpi_teleport.core.plan",
    "mix": "mpi_teleport.core.algorithms:mix",
    # the runtime: the engine, the transport, the back ends, the recorders
    "engine": "mpi_teleport.runtime.engine",
    "Transport": "mpi_teleport.runtime.transport:Transport",
    "ElasticTransport": "mpi_teleport.elastic.transport:ElasticTransport",
    "KIND_Y": "mpi_teleport.runtime.transport:KIND_Y",
    "PIECE_BYTES": "mpi_teleport.runtime.transport:PIECE_BYTES",
    "pieces": "mpi_teleport.runtime.transport:pieces",
    "MpiBackend": "mpi_teleport.runtime.backends.mpi:MpiBackend",
    "BLOCK_ROUNDS": "mpi_teleport.runtime.backends.mpi:BLOCK_ROUNDS",
    "ElasticBackend": "mpi_teleport.elastic.backend:ElasticBackend",
    "mpi_backend": "mpi_teleport.runtime.backends.mpi",
    "compiled_backend": "mpi_teleport.runtime.backends.compiled",
    "device_backend": "mpi_teleport.runtime.backends.device",
    "metrics": "mpi_teleport.runtime.metrics",
    "Recorder": "mpi_teleport.runtime.metrics:Recorder",
    "CRITERIA": "mpi_teleport.runtime.search:CRITERIA",
    "keep_freed_memory": "mpi_teleport.runtime.memory:keep_freed_memory",
    "stop_watch": "mpi_teleport.runtime.stop_watch",
    "keeper": "mpi_teleport.checkpoint.keeper",
    # the latency layer and the trace
    "LatencySettings": "mpi_teleport.latency.model:LatencySettings",
    "parse_spec": "mpi_teleport.latency:parse_spec",
    "for_run": "mpi_teleport.latency.virtual_clock:for_run",
    "round_plan": "mpi_teleport.latency.virtual_clock:round_plan",
    "round_links": "mpi_teleport.latency.virtual_clock:round_links",
    "chrome": "mpi_teleport.trace.chrome",
    "load_trace": "mpi_teleport.trace.chrome:load",
    "make_spans": "mpi_teleport.trace.spans:make_spans",
    "STEP": "mpi_teleport.trace.spans:STEP",
    "Tracer": "mpi_teleport.trace.tracer:Tracer",
    # output files
    "RunFiles": "mpi_teleport.disk.output:RunFiles",
    "read_jsonl": "mpi_teleport.disk.output:read_jsonl",
    "write_json": "mpi_teleport.disk.output:write_json",
    # the bundled problems and their data
    "with_defaults": "mpi_teleport.problem:with_defaults",
    "Quadratic": "mpi_teleport.problems.quadratic:Quadratic",
    "quadratic": "mpi_teleport.problems.quadratic:quadratic",
    "make_problem": "mpi_teleport.problems:make_problem",
    "models": "mpi_teleport.problems.models",
    "datasets": "mpi_teleport.problems.datasets",
    "network": "mpi_teleport.problems.network",
    "fashion_mnist": "mpi_teleport.problems.network:fashion_mnist",
    "fashion_files": "mpi_teleport.problems.fashion_files",
    "authors_recipe": "mpi_teleport.problems.authors_recipe",
    "DatasetMissingError": "mpi_teleport.errors:DatasetMissingError",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    """The name's object, imported now (then kept here)."""
    try:
        module, _, attribute = _NAMES[name].partition(":")
    except KeyError:
        raise AttributeError(f"module 'mpi_teleport.measure' has no attribute {name!r} "
                             f"(the measurement surface is mpi_teleport.measure.__all__)"
                             ) from None
    found = importlib.import_module(module)
    value = getattr(found, attribute) if attribute else found
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return list(__all__)
