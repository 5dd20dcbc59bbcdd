"""Ready ``callback=`` writers for the API: each is called on the root with every record
(the dict written to metrics.jsonl) after a logged round.

* :class:`CsvWriter` -- one CSV row per record (numbers only; a nested dict such as
  Algorithm 2's ``accuracy_by_k`` becomes one column per key, ``accuracy_by_k/2``).
* :class:`TensorBoardWriter` -- scalars for TensorBoard, through
  ``torch.utils.tensorboard`` (needs torch and the ``tensorboard`` package:
  ``pip install mpi_teleport[tensorboard]``).

Both return None (the run goes on); chain them with your own early stopping::

    csv = mt.CsvWriter("run.csv")
    def callback(record):
        csv(record)
        return record.get("accuracy", 0) > 0.95   # True stops the run
"""
from __future__ import annotations

import csv
from pathlib import Path

__all__ = ["CsvWriter", "TensorBoardWriter", "flatten"]


def flatten(record: dict) -> dict:
    """Numbers of a record, one level deep: ``{"a_by_k": {"2": x}}`` -> ``{"a_by_k/2": x}``;
    booleans, strings and None are left out."""
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update({f"{key}/{k}": v for k, v in flatten(value).items()})
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = value
    return out


class CsvWriter:
    """A ``callback`` writing each record as a CSV row to ``path``.

    >>> import csv, tempfile
    >>> import mpi_teleport as mt
    >>> from mpi_teleport.problems.quadratic import Quadratic
    >>> path = tempfile.mkdtemp() + "/records.csv"
    >>> _ = mt.teleportation(Quadratic(n=8, d=3), nodes=8, k=2, rounds=20, lr=0.1,
    ...                      callback=mt.CsvWriter(path))
    >>> [row["round"] for row in csv.DictReader(open(path))]
    ['0', '10', '20']

    The columns are every key seen so far: a record with a new one (round 1 brings ``train_loss``; with
    ``eval_every`` the first evaluated record may come later) rewrites the file with the
    wider header, missing values left empty. The file is flushed after every row, so it
    can be followed while the run goes on."""

    def __init__(self, path):
        self.path = Path(path)
        self._file = self._writer = None
        self._rows: list[dict] = []
        self._fields: list[str] = []

    def __call__(self, record: dict) -> None:
        row = flatten(record)
        self._rows.append(row)
        new = [key for key in row if key not in self._fields]
        if self._writer is None or new:  # (rare: the header widens, the rows are written again)
            self._fields += new
            self.close()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "w", newline="")
            self._writer = csv.DictWriter(self._file, fieldnames=self._fields)
            self._writer.writeheader()
            self._writer.writerows(self._rows)
        else:
            self._writer.writerow(row)
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = self._writer = None


class TensorBoardWriter:
    """``callback`` writing each record's numbers as TensorBoard scalars (tag: the key,
    step: the record's ``round``) into ``log_dir``. Raises ImportError naming the
    package to install when ``tensorboard`` is absent."""

    def __init__(self, log_dir):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ImportError("TensorBoardWriter needs torch and tensorboard: pip install "
                              "'mpi_teleport[tensorboard]' (or use CsvWriter)") from exc
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def __call__(self, record: dict) -> None:
        step = int(record.get("round", 0))
        for key, value in flatten(record).items():
            if key != "round":
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
