"""metrics.csv (one row per round, every stat the run produces) and the same scalars in TensorBoard.

Rows are appended; the file is rewritten whole, atomically, only when a new column appears (the
first evaluation, an SB3 stat) or when a resumed run drops the rounds after its checkpoint. It is
never truncated in place: a run killed at any moment leaves every earlier row.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path
from typing import Any

from gailkit.core import fsutil, limits
from gailkit.core.errors import InputError, first_line
from gailkit.core.textparse import shown

FIRST = ("round", "env_steps")
WHOLE = re.compile(r"[0-9]{1,18}")  # ASCII digits only: str.isdigit takes '²', which int() refuses


def read_rows(path: Path) -> list[dict[str, str]]:
    """The complete rows of a metrics file (a last line cut short by a kill, or being written, is left out).

    Resume, `evaluate`'s plots and `tune --resume` parse its values, so a file that gailkit could not have
    written (a link, text that is not a table of numbers, a round that is not a whole number) is one
    `InputError` naming the file, line and column, never a traceback from a reader."""
    if os.path.islink(path):
        raise InputError(f"{path}: a link; gailkit reads a run's metrics only from a plain file in the run")
    if not path.is_file():
        return []
    try:
        text = fsutil.read_regular(path, limits.memory_budget()).decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a metrics file gailkit wrote (not UTF-8 text)") from None
    text = text[: text.rfind("\n") + 1]  # whole lines only
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = []
    try:
        header = reader.fieldnames or []
        foreign = not set(FIRST) <= set(header)  # refused only once it has a row: a bare header holds nothing
        for row in reader:
            if foreign:
                raise InputError(
                    f"{path}: its header has no {' and '.join(FIRST)} columns; not a metrics file gailkit wrote"
                )
            where = f"{path}: line {reader.line_num}"
            if None in row or None in row.values():
                raise InputError(f"{where}: not as many fields as the header's {len(header)}")
            for key, value in row.items():
                if key in FIRST:
                    if not WHOLE.fullmatch(value):
                        raise InputError(f"{where}: {key} is {shown(value)}, not a whole number")
                elif value:
                    try:
                        float(value)
                    except ValueError:
                        raise InputError(f"{where}: {shown(key)} is {shown(value)}, not a number") from None
            rows.append(row)
    except csv.Error as e:
        raise InputError(f"{path}: line {reader.line_num}: not a CSV table ({first_line(e)})") from None
    return rows


class MetricsLog:
    def __init__(self, path: Path, tensorboard: Path | None, keep_through_round: int | None = None):
        """Continue `path` keeping rows up to `keep_through_round` (resume), or start it empty."""
        self.path = path
        self.rows = [
            r for r in read_rows(path) if keep_through_round is not None and int(r["round"]) <= keep_through_round
        ]
        self.columns = list(FIRST)
        for row in self.rows:
            self._add_columns(row)
        self._rewrite()
        self.tb = None
        if tensorboard is not None:
            from torch.utils.tensorboard import SummaryWriter

            purge = int(self.rows[-1]["env_steps"]) + 1 if self.rows else None  # drop events after the checkpoint
            self.tb = SummaryWriter(str(tensorboard), purge_step=purge)

    def _add_columns(self, row: dict[str, Any]) -> bool:
        new = [k for k in row if k not in self.columns]
        self.columns.extend(sorted(new))
        return bool(new)

    def _rewrite(self) -> None:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=self.columns, restval="")
        writer.writeheader()
        writer.writerows(self.rows)
        fsutil.atomic_write_text(self.path, buf.getvalue())

    def write(self, stats: dict[str, Any]) -> None:
        row = {k: _fmt(v) for k, v in stats.items()}
        self.rows.append(row)
        if self._add_columns(row):
            self._rewrite()
        else:
            with open(self.path, "a", newline="") as f:
                csv.DictWriter(f, fieldnames=self.columns, restval="").writerow(row)
        if self.tb is not None:
            step = int(stats["env_steps"])
            for key, value in stats.items():
                if "/" in key and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)
            self.tb.flush()

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
            self.tb = None


def _fmt(v: Any) -> Any:
    return f"{v:.6g}" if isinstance(v, float) else v
