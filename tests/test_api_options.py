"""The API's option objects (mt.Records, mt.Checkpoints, mt.Latency): the same runs and
records as the flat keywords, the same one-line refusals for bad values, and one line
when a call sets one setting both ways. In-process (the simulator), no MPI."""
from __future__ import annotations

import inspect

import pytest

import mpi_teleport as mt
from helpers import without_time
from mpi_teleport.session.settings import FLAT
from mpi_teleport.problems.quadratic import Quadratic

BASE = dict(nodes=4, k=2, rounds=6, lr=0.1)


def _run(function: str = "teleportation", **kwargs):
    settings = {**BASE, **kwargs}
    if function != "teleportation":
        settings.pop("k")
    return getattr(mt, function)(Quadratic(n=4, d=3, sigma2=1.0), **settings)


def test_the_option_classes_are_exported_and_frozen():
    assert {"Records", "Checkpoints", "Latency"} <= set(mt.__all__)
    with pytest.raises(AttributeError):
        mt.Records().every = 3  # (frozen: FrozenInstanceError is an AttributeError)


def test_the_defaults_are_todays():
    """The signature still shows the plain defaults, and the objects' match them."""
    params = inspect.signature(mt.teleportation).parameters
    for cls, names in FLAT.items():
        for field, flat in names.items():
            if flat == "latency":
                continue
            assert repr(params[flat].default) == repr(getattr(cls(), field)), flat
    assert repr(params["latency"].default) == repr(mt.Latency().latency)


@pytest.mark.parametrize("function", ["teleportation", "dsgd", "search_k"])
def test_records_gives_the_flat_keywords_records(function):
    seen_flat, seen_obj = [], []
    flat = _run(function, log_every=2, target=0.5, progress=False, callback=seen_flat.append)
    grouped = _run(function, records=mt.Records(log_every=2, target=0.5,
                                                callback=seen_obj.append))
    assert without_time(flat.records) == without_time(grouped.records)
    assert without_time(seen_flat) == without_time(seen_obj) and seen_obj
    assert flat.summary["rounds_to_target"] == grouped.summary["rounds_to_target"]


def test_stop_at_target_in_records_stops_as_the_keyword():
    flat = _run(rounds=40, log_every=1, target=2.0, stop_at_target=True)
    grouped = _run(rounds=40, records=mt.Records(log_every=1, target=2.0, stop_at_target=True))
    assert without_time(flat.records) == without_time(grouped.records)
    assert flat.records[-1]["round"] < 40


@pytest.mark.parametrize("function", ["teleportation", "dsgd"])
def test_checkpoints_writes_and_resumes_as_the_flat_keywords(function, tmp_path):
    full = _run(function, rounds=6, log_every=1)
    _run(function, rounds=4, log_every=1, out=tmp_path / "a",
         checkpoints=mt.Checkpoints(checkpoint_every=2, keep_checkpoints=1))
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()
                  if p.name.startswith("round-")) == ["round-00000004"]
    resumed = _run(function, rounds=6, log_every=1, out=tmp_path / "b",
                   checkpoints=mt.Checkpoints(resume=tmp_path / "a"))
    flat = _run(function, rounds=6, log_every=1, out=tmp_path / "c", resume=tmp_path / "a")
    assert without_time(resumed.records) == without_time(flat.records)
    assert resumed.records[-1] == {**full.records[-1], "time_s": resumed.records[-1]["time_s"]}


def test_latency_object_equals_the_flat_keywords():
    flat = _run(latency="const:5", clock="virtual", compute_time=10.0, log_every=2)
    grouped = _run(latency=mt.Latency("const:5", clock="virtual", compute_time=10.0),
                   log_every=2)
    assert without_time(flat.records) == without_time(grouped.records)
    assert "virtual_time_s" in grouped.records[-1]


# a setting given both ways: one line naming both
BOTH = [
    ("teleportation", dict(log_every=5, records=mt.Records(log_every=2)), "log_every= and records=Records(log_every=...)"),
    ("teleportation", dict(log_every=10, records=mt.Records()), "log_every= and records=Records(log_every=...)"),
    ("dsgd", dict(callback=print, records=mt.Records()), "callback= and records=Records(callback=...)"),
    ("teleportation", dict(resume="x", checkpoints=mt.Checkpoints()), "resume= and checkpoints=Checkpoints(resume=...)"),
    ("dsgd", dict(keep_checkpoints=3, checkpoints=mt.Checkpoints()), "keep_checkpoints= and checkpoints=Checkpoints(keep_checkpoints=...)"),
    ("teleportation", dict(clock="virtual", latency=mt.Latency()), "clock= and latency=Latency(clock=...)"),
    ("search_k", dict(compute_time=1.0, latency=mt.Latency()), "compute_time= and latency=Latency(compute_time=...)"),
    ("search_k", dict(records=mt.Records(stop_at_target=True)), "stop_at_target is not a setting of this function"),
    ("teleportation", dict(records=dict(every=2)), "records: expected mpi_teleport.Records(...) or None"),
    ("teleportation", dict(checkpoints=mt.Records()), "checkpoints: expected mpi_teleport.Checkpoints(...)"),
]


@pytest.mark.parametrize("function,kwargs,says", BOTH, ids=[r[2].split("=")[0] + "-" + r[0] for r in BOTH])
def test_a_setting_given_both_ways_is_one_usage_error_line(function, kwargs, says):
    with pytest.raises(mt.UsageError) as caught:
        _run(function, **kwargs)
    assert says in str(caught.value) and "\n" not in str(caught.value)


# a bad value says the same words in an option object as in its flat keyword
SAME_WORDS = [
    (dict(log_every=0), dict(records=mt.Records(log_every=0))),
    (dict(log_every=2.5), dict(records=mt.Records(log_every=2.5))),
    (dict(target=0), dict(records=mt.Records(target=0))),
    (dict(stop_at_target="yes"), dict(records=mt.Records(stop_at_target="yes"))),
    (dict(progress="yes"), dict(records=mt.Records(progress="yes"))),
    (dict(keep_checkpoints=0), dict(checkpoints=mt.Checkpoints(keep_checkpoints=0))),
    (dict(checkpoint_every=-1), dict(checkpoints=mt.Checkpoints(checkpoint_every=-1))),
    (dict(checkpoint_every=2), dict(checkpoints=mt.Checkpoints(checkpoint_every=2))),
    (dict(checkpoint_dir="", checkpoint_every=1), dict(checkpoints=mt.Checkpoints(checkpoint_dir="", checkpoint_every=1))),
    (dict(resume=""), dict(checkpoints=mt.Checkpoints(resume=""))),
    (dict(latency="slow"), dict(latency=mt.Latency(latency="slow"))),
    (dict(latency=5), dict(latency=mt.Latency(latency=5))),
    (dict(clock="fast"), dict(latency=mt.Latency(clock="fast"))),
    (dict(compute_time=-1), dict(latency=mt.Latency(compute_time=-1))),
]


@pytest.mark.parametrize("flat,grouped", SAME_WORDS, ids=[next(iter(f)) + str(i) for i, (f, _) in enumerate(SAME_WORDS)])
def test_a_bad_value_in_an_option_object_says_the_flat_keywords_words(flat, grouped):
    with pytest.raises(mt.UsageError) as by_keyword:
        _run(**flat)
    with pytest.raises(mt.UsageError) as by_object:
        _run(**grouped)
    assert str(by_object.value) == str(by_keyword.value)
    assert "\n" not in str(by_object.value)


def test_search_k_refuses_checkpoints_in_one_line():
    with pytest.raises(TypeError):  # (search_k takes no checkpoints keyword at all)
        _run("search_k", checkpoints=mt.Checkpoints(checkpoint_every=2))


def test_the_option_groups_fields_are_named_as_their_settings():
    """One name per setting: a group's field is the flat keyword of the same name; the
    older field names still work, with a DeprecationWarning naming the new one, and
    beside the new one they are refused."""
    import warnings

    from mpi_teleport.errors import UsageError

    for cls, names in FLAT.items():
        assert all(field == flat for field, flat in names.items()), cls
    olds = [(mt.Checkpoints, {"every": 5}, "checkpoint_every", 5),
            (mt.Checkpoints, {"dir": "c"}, "checkpoint_dir", "c"),
            (mt.Checkpoints, {"keep": 3}, "keep_checkpoints", 3),
            (mt.Records, {"every": 7}, "log_every", 7),
            (mt.Records, {"every_epochs": 2}, "log_every_epochs", 2),
            (mt.Latency, {"model": "const:5"}, "latency", "const:5")]
    for cls, old, new, value in olds:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            group = cls(**old)
        assert getattr(group, new) == value and group == cls(**{new: value})
        assert any(issubclass(w.category, DeprecationWarning) and f"{new}=" in str(w.message)
                   for w in caught)
        with pytest.raises(UsageError, match=f"give {new}="):
            cls(**old, **{new: value})
