"""Issue 22's example (mpi_teleport/examples/ported_script.py): a plain PyTorch script
(plain_script.py beside it) ported with CNN + augmentation + weight decay + cosine lr +
CSV/TensorBoard callback + custom metric runs in the simulator and under mpirun with
equal records, and the port stays within 1.5x the plain script's code lines."""
import ast
import csv
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

from mpi_teleport.disk.output import read_jsonl
from helpers import without_time

pytestmark = [pytest.mark.torch, pytest.mark.one_mpi,
              pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("torch", "sklearn")),
                                 reason="needs torch and scikit-learn (the nn extra)")]

EXAMPLES = Path(__file__).resolve().parents[1] / "mpi_teleport" / "examples"


def code_lines(path: Path) -> int:
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    text = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            docstrings.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                            tokenize.DEDENT, tokenize.ENDMARKER):
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def test_the_port_stays_within_one_and_a_half_times_the_plain_script():
    plain, port = code_lines(EXAMPLES / "plain_script.py"), code_lines(EXAMPLES / "ported_script.py")
    assert port <= 1.5 * plain, (plain, port)
    doc = (EXAMPLES / "ported_script.py").read_text()
    said = re.search(r"plain script\s+(\d+), this port (\d+)", doc)
    assert said and (int(said[1]), int(said[2])) == (plain, port), (plain, port)


_numbers = without_time  # (tests/helpers.py)


def test_the_ported_script_under_mpirun_equals_the_simulator(tmp_path, mpirun):
    from mpi_teleport.examples import ported_script

    flags = ["--epochs", "1", "--k", "2"]
    assert ported_script.main(["--nodes", "2", *flags, "--out", str(tmp_path / "sim")]) == 0
    proc = mpirun(2, ["-m", "mpi_teleport.examples.ported_script", "--mpi", *flags,
                      "--out", str(tmp_path / "mpi")], timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim = read_jsonl(tmp_path / "sim" / "metrics.jsonl")
    assert [r["round"] for r in sim] == [0, 1, 22] and "macro_f1" in sim[0]
    assert _numbers(read_jsonl(tmp_path / "mpi" / "metrics.jsonl")) == _numbers(sim)
    with open(tmp_path / "sim" / "log.csv") as a, open(tmp_path / "mpi" / "log.csv") as b:
        assert _numbers(csv.DictReader(a)) == _numbers(csv.DictReader(b))
