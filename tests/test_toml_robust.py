"""--config FILE.toml that cannot be read as settings: one line, exit status 2, never a
traceback (not UTF-8, nested 100,000 deep, a directory, unreadable, not a regular file)."""
from __future__ import annotations

import os

import pytest

from mpi_teleport.session.settings import UsageError, from_toml
from mpi_teleport.sim import main as sim_main


def _bad_configs(tmp_path):
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes("lr = 0.1 # caf\xe9\n".encode("latin-1"))
    deep = tmp_path / "deep.toml"
    deep.write_text("lr = " + "[" * 100_000 + "]" * 100_000 + "\n")
    deep_tables = tmp_path / "deep_tables.toml"
    deep_tables.write_text("lr = " + "{a = " * 100_000 + "1" + "}" * 100_000 + "\n")
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    big.write_text("# " + "x" * (2 << 20) + "\n")
    return {
        "not UTF-8": (latin1, "not UTF-8 text (byte 0xe9 at offset 14); save it as UTF-8"),
        "nested arrays": (deep, "nested too deeply to read"),
        "nested tables": (deep_tables, "nested too deeply to read"),
        "a directory": (tmp_path, "is a directory; give a TOML file"),
        "unreadable": ("/proc/self/mem", "cannot read the file"),
        "a FIFO": (fifo, "not a regular file"),
        "too large": (big, "larger than 1 MiB"),
        "missing": (tmp_path / "nope.toml", "not found"),
        "NUL in name": (str(tmp_path) + "/a\0b.toml", "--config"),
        "invalid TOML": (tmp_path / "latin1.toml.bad", "not valid TOML"),
    }


@pytest.fixture
def bad(tmp_path):
    (tmp_path / "latin1.toml.bad").write_text("lr = = 1\n")
    return _bad_configs(tmp_path)


CASES = ["not UTF-8", "nested arrays", "nested tables", "a directory", "unreadable", "a FIFO",
         "too large", "missing", "NUL in name", "invalid TOML"]


@pytest.mark.parametrize("case", CASES)
def test_from_toml_refuses_in_one_line(bad, case):
    path, fragment = bad[case]
    with pytest.raises(UsageError) as e:
        from_toml(str(path))
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("case", ["not UTF-8", "nested arrays", "a directory", "unreadable"])
def test_command_line_prints_one_line_exit_2(bad, case, capsys):
    path, fragment = bad[case]
    assert sim_main(["--config", str(path), "--nodes", "2", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m mpi_teleport.sim: error: --config")
    assert fragment in err and "Traceback" not in err
