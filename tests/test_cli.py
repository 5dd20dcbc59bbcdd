"""Bad input gives one clear line on stderr and exit status 2 (mpi_teleport/DESIGN.md §10.3)."""
import subprocess
import sys

import pytest

from mpi_teleport import sim

BAD = [
    (["--nodes", "5", "--k", "6"], "exceeds the number of nodes"),
    (["--nodes", "5", "--k", "0"], "at least 1"),
    (["--nodes", "5", "--k", "two"], "integer or 'auto'"),
    (["--nodes", "0"], "at least 1"),
    ([], "--nodes is required"),
    (["--nodes", "5", "--topology", "star"], "unknown value 'star'"),
    (["--nodes", "5", "--algorithm", "adam"], "unknown value 'adam'"),
    (["--nodes", "5", "--variant", "fast"], "unknown value 'fast'"),
    (["--nodes", "5", "--problem", "mnist"], "unknown value 'mnist'"),
    (["--nodes", "5", "--lr", "0"], "--lr must be > 0"),
    (["--nodes", "5", "--lr", "-1"], "--lr must be > 0"),
    (["--nodes", "5", "--lr", "nan"], "finite"),
    (["--nodes", "5", "--momentum", "1"], "[0, 1)"),
    (["--nodes", "5", "--sigma2", "-1"], ">= 0"),
    (["--nodes", "5", "--rounds", "0"], "--rounds must be at least 1"),
    (["--nodes", "5", "--rounds", "1.5"], "expected an integer"),
    (["--nodes", "5", "--dim", "0"], "--dim"),
    (["--nodes", "5", "--target", "0"], "--target"),
    (["--nodes", "5", "--log-every", "0"], "--log-every"),
    (["--nodes", "5", "--seed", "-3"], "--seed"),
    (["--nodes", "5", "--bogus"], "unrecognized arguments"),
    (["--nodes", "5", "--config", "/nonexistent.toml"], "not found"),
    (["--nodes", "5", "--checkpoint-every", "10"], "--checkpoint-every needs a place to write"),
    (["--nodes", "5", "--checkpoint-every", "-2"], "--checkpoint-every must be >= 0"),
    (["--nodes", "5", "--keep-checkpoints", "0"], "--keep-checkpoints must be at least 1"),
    (["--nodes", "5", "--k", "auto", "--checkpoint-every", "5", "--checkpoint-dir", "/tmp/x"],
     "not supported with --k auto"),
    (["--nodes", "5", "--resume", "/nonexistent/run"], "--resume /nonexistent/run: no such directory"),
    (["--nodes", "5", "--out", "/dev/null"], "exists and is not a directory"),
]


@pytest.mark.parametrize("argv,fragment", BAD)
def test_bad_input_one_line_exit_2(argv, fragment, capsys):
    assert sim.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert fragment in lines[0]
    assert lines[0].startswith("python -m mpi_teleport.sim: error:")
    assert captured.out == ""


def test_bad_toml(tmp_path, capsys):
    bad_key = tmp_path / "a.toml"
    bad_key.write_text("learning_rate = 0.1\n")
    assert sim.main(["--nodes", "5", "--config", str(bad_key)]) == 2
    assert "unknown key 'learning_rate'" in capsys.readouterr().err
    bad_syntax = tmp_path / "b.toml"
    bad_syntax.write_text("lr = = 1\n")
    assert sim.main(["--nodes", "5", "--config", str(bad_syntax)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    bad_type = tmp_path / "c.toml"
    bad_type.write_text('rounds = "many"\n')
    assert sim.main(["--nodes", "5", "--config", str(bad_type)]) == 2
    assert "expected an integer" in capsys.readouterr().err


def test_flags_override_config_file(tmp_path):
    cfg_file = tmp_path / "run.toml"
    cfg_file.write_text('nodes = 6\nk = 2\nrounds = 30\nlog-every = 30\ntopology = "base2"\nlr = 0.01\n')
    assert sim.main(["--config", str(cfg_file), "--rounds", "20", "--algorithm", "teleportation",
                     "--out", str(tmp_path / "o")]) == 0
    import json

    written = json.loads((tmp_path / "o" / "config.json").read_text())
    assert written["rounds"] == 20 and written["k"] == 2 and written["topology"] == "base2"
    assert written["lr"] == 0.01 and written["nodes"] == 6


def test_non_finite_loss_names_round_and_token(capsys):
    assert sim.main(["--nodes", "25", "--lr", "5", "--algorithm", "teleportation", "--rounds", "500"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "non-finite at round" in err[0] and "token" in err[0]


def test_help_documents_every_flag():
    out = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--help"],
                         capture_output=True, text=True, check=True).stdout
    from mpi_teleport.session.settings import OPTIONS

    for opt in OPTIONS:
        assert opt.flag in out
    assert "--config" in out


def test_exit_status_in_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "mpi_teleport.sim", "--nodes", "3", "--k", "4"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
