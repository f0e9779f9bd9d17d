"""The on-disk layout of the regression table, defined once: the files `gptlineage small-data` writes.

The table is written twice: as a CSV (header x1,x2,y) and as two float32 NPY arrays, the
inputs (N, 2) and the targets (N, 1). `data-csv` and `data-npy` read them; the workflow's
tabular rules pass their paths.

Example (after `gptlineage small-data --output results/small_data`):
    table = TableDir(Path("results/small_data"))
    table.csv       # results/small_data/small_regression.csv
    table.x         # results/small_data/small_regression_X.npy
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CSV_FILE = "small_regression.csv"
X_FILE = "small_regression_X.npy"
Y_FILE = "small_regression_y.npy"
# Where `gptlineage small-data --output results/small_data` (the workflow's rule) writes the table.
DEFAULT_DIR = Path("results/small_data")


@dataclass(frozen=True)
class TableDir:
    """The files of one regression-table directory."""

    path: Path

    @property
    def csv(self) -> Path:
        return self.path / CSV_FILE

    @property
    def x(self) -> Path:
        return self.path / X_FILE

    @property
    def y(self) -> Path:
        return self.path / Y_FILE
