"""The training functions' keywords are written once (mpi_teleport/session/keywords.py: the
typed bundles, the defaults, the signatures help() shows), each explained once in the
manual's page of the keywords, and ``RunSettings.from_keywords`` gives the settings a call
runs with: ``mt.train(p, RunSettings.from_keywords(p, algorithm=f, **kw))`` is
``mt.f(p, **kw)``, record for record (simulator only)."""
import inspect
import re
from pathlib import Path

import pytest

import mpi_teleport as mt
from helpers import without_time
from mpi_teleport.errors import UsageError
from mpi_teleport.session.keywords import DEFAULTS, FUNCTIONS, names
from mpi_teleport.problems.quadratic import Quadratic

ROOT = Path(__file__).resolve().parents[1]
FUNCTION_NAMES = ("teleportation", "dsgd", "search_k")


@pytest.mark.parametrize("function", FUNCTION_NAMES)
def test_each_signature_is_the_table(function):
    """help() shows every keyword with its type and default, made of the one table."""
    params = inspect.signature(getattr(mt, function)).parameters
    required, bundle = FUNCTIONS[function]
    assert list(params) == ["problem", *required, *names(bundle)]
    for name in names(bundle):
        assert params[name].default is DEFAULTS[name], name
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY
        assert params[name].annotation == bundle.__annotations__[name].__forward_arg__
    for name in required:
        assert params[name].default is inspect.Parameter.empty
    # what IDEs and type checkers read: **keywords typed by the bundle (mypy checks a call's
    # keywords against it; the decorator keeps the function and its type)
    assert getattr(mt, function).__annotations__["keywords"] == f"Unpack[{bundle.__name__}]"


def test_every_default_belongs_to_a_bundle():
    taken = {name for _, bundle in FUNCTIONS.values() for name in names(bundle)}
    assert taken == set(DEFAULTS)


def test_a_keyword_the_function_does_not_take_is_pythons_type_error():
    with pytest.raises(TypeError, match=r"^dsgd\(\) got an unexpected keyword argument 'k'$"):
        mt.dsgd(Quadratic(n=4, d=2), nodes=4, k=2, rounds=2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'checkpoint_every'"):
        mt.search_k(Quadratic(n=4, d=2), nodes=4, rounds=2, lr=0.1, checkpoint_every=1)
    with pytest.raises(TypeError, match=r"missing required keyword-only argument: 'k'"):
        mt.RunSettings.from_keywords(Quadratic(n=4, d=2), nodes=4, rounds=2)


def _definitions(text: str) -> list[str]:
    """The keywords docs/reference/keywords.md defines: a definition term (a line of
    backticked names alone, or ending in ``:``) and a ``Grouped: `name=...`` line."""
    found = []
    for paragraph in text.split("\n\n"):  # (``Grouped: `latency=...`, or `latency`, ...``)
        here: set[str] = set()
        for line in paragraph.splitlines():
            grouped = re.match(r"Grouped: `(\w+)=", line)
            term = re.match(r"((?:`\w+`(?:, )?)+)(:|$)", line)
            if grouped:
                here.add(grouped.group(1))
            elif term:
                here |= set(re.findall(r"`(\w+)`", term.group(1)))
        found += sorted(here)
    return found


def test_each_keyword_is_explained_once_in_the_manual():
    defined = _definitions((ROOT / "docs" / "reference" / "keywords.md").read_text())
    keywords = {name for function in FUNCTION_NAMES
                for name in inspect.signature(getattr(mt, function)).parameters}
    once = {name for name in keywords if defined.count(name) == 1}
    assert once == keywords, {name: defined.count(name) for name in keywords - once}
    assert set(defined) <= keywords, set(defined) - keywords


def _same(function, problem_of, keywords):
    """The call and train(from_keywords) of the same keywords give the same records, the
    same summary and the same records handed to the callback."""
    seen_call, seen_settings = [], []
    called = getattr(mt, function)(problem_of(), **keywords(seen_call.append, "call"))
    settings = mt.RunSettings.from_keywords(problem_of(), algorithm=function,
                                            **keywords(seen_settings.append, "settings"))
    trained = mt.train(problem_of(), settings)
    assert without_time(called.records) == without_time(trained.records) and called.records
    assert without_time(seen_call) == without_time(seen_settings)
    summary = {key for key in called.summary if "time" not in key and key != "out"}
    assert {key: called.summary[key] for key in summary} == \
        {key: trained.summary[key] for key in summary}
    assert called.k == trained.k and (called.x == trained.x).all()
    return called, trained


def quadratic():
    return Quadratic(n=6, d=3, sigma2=1.0, zeta2=0.5)


CASES = {
    "teleportation": ("teleportation", lambda cb, tag: dict(
        nodes=6, k=2, rounds=12, lr=0.05, log_every=3, target=0.5, callback=cb,
        variant="simple", topology="exp", seed=3)),
    "dsgd-schedule": ("dsgd", lambda cb, tag: dict(
        nodes=6, rounds=10, lr=lambda t: 0.1 / (1 + t), momentum=0.5, nesterov=True,
        records=mt.Records(log_every=2, callback=cb), latency="const:50", clock="virtual",
        compute_time=10.0)),
    "search_k": ("search_k", lambda cb, tag: dict(
        nodes=6, rounds=8, lr=0.05, select="tokens", log_every=4, callback=cb)),
    "teleportation-fail": ("teleportation", lambda cb, tag: dict(
        nodes=6, k=3, rounds=10, lr=0.05, log_every=2, callback=cb, fail=["1@4"])),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_from_keywords_then_train_is_the_call(case):
    function, keywords = CASES[case]
    _same(function, quadratic, keywords)


def test_from_keywords_with_checkpoints_writes_what_the_call_writes(tmp_path):
    def keywords(cb, tag):
        return dict(nodes=6, k=2, rounds=12, lr=0.05, log_every=4, callback=cb,
                    out=tmp_path / tag, checkpoint_every=4, keep_checkpoints=2)

    _same("teleportation", quadratic, keywords)
    files = {tag: sorted(str(p.relative_to(tmp_path / tag))
                         for p in (tmp_path / tag).rglob("*") if p.is_file())
             for tag in ("call", "settings")}
    assert files["call"] == files["settings"] and any("round-" in f for f in files["call"])
    resumed = {}
    for tag in ("call", "settings"):  # (a resume of either, by either)
        more = dict(nodes=6, k=2, rounds=16, lr=0.05, log_every=4, resume=tmp_path / tag,
                    out=tmp_path / f"{tag}-more")
        resumed[tag] = (mt.teleportation(quadratic(), **more) if tag == "call" else
                        mt.train(quadratic(), mt.RunSettings.from_keywords(quadratic(), **more)))
    assert without_time(resumed["call"].records) == without_time(resumed["settings"].records)


def test_from_keywords_refuses_as_the_call_refuses(tmp_path):
    """Bad input: the call's one line, before anything runs; the inputs on disk included."""
    for keywords in (dict(nodes=6, k=9, rounds=4, lr=0.1),
                     dict(nodes=6, k=2, rounds=4, lr=0.1, resume=tmp_path / "none"),
                     dict(nodes=6, k=2, rounds=4, lr=0.1, log_every=0)):
        with pytest.raises(UsageError) as call:
            mt.teleportation(quadratic(), **keywords)
        with pytest.raises(UsageError) as settings:
            mt.RunSettings.from_keywords(quadratic(), **keywords)
        assert str(call.value) == str(settings.value)
    with pytest.raises(UsageError, match=r"^algorithm='compare': expected 'teleportation'"):
        mt.RunSettings.from_keywords(quadratic(), algorithm="compare", nodes=6, rounds=4)


@pytest.mark.torch
def test_from_keywords_with_a_torch_optimizer_and_scheduler_is_the_call():
    torch = pytest.importorskip("torch")
    import functools

    from torch_toys import blobs, net

    torch.set_num_threads(1)

    def problem():
        return mt.TorchProblem(net, blobs(), nodes=4, seed=1, test=blobs(24, 1),
                               batch_size=4)

    def keywords(cb, tag):
        return dict(nodes=4, k=2, epochs=1, log_every=4, callback=cb,
                    optimizer=functools.partial(torch.optim.AdamW, lr=0.01,
                                                weight_decay=0.05),
                    lr=lambda opt: torch.optim.lr_scheduler.StepLR(opt, 2, 0.5),
                    lr_step="round")

    _same("teleportation", problem, keywords)
