"""Issue 22's example (mpi_teleport/examples/ported_script.py): a plain PyTorch script
(plain_script.py beside it) ported with CNN + augmentation + weight decay + cosine lr +
CSV/TensorBoard callback + custom metric stays within 1.5x the plain script's code lines
(under MPI with records equal to the simulator's: tests/in_rank/test_examples_mpi.py)."""
import ast
import importlib.util
import io
import re
import tokenize
from pathlib import Path

import pytest

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


# The port under MPI, equal to the simulator (records and CSV log):
# tests/in_rank/test_examples_mpi.py.
