"""The tabular commands' settings, without torch or numpy: `small-data`, `data-csv` and `data-npy`.

Every dataclass here is a command's flags and its workflow config slice. The code that runs
them (`runtime`, `csv_loader`, `regression`, `tutorial`) imports them from here, so the
workflow checks a tabular slice before any job without loading torch.

Example:
    >>> DataCsvConfig(CsvTraining(), TableCsvOptions(), RuntimeSettings()).training.steps
    30
    >>> scalar_name("ieee", "float32")
    'IEEE32Exec'
    >>> CsvOptions(delimiter=";;")
    Traceback (most recent call last):
    ...
    gptlineage.core.settings.SettingError: --delimiter must be exactly one character, got ';;'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.settings import SettingError, as_mapping, check_settings, setting
from gptlineage.tabular.layout import DEFAULT_DIR, TableDir

ARITHMETICS = ("native", "ieee")
DEVICES = ("cpu",)  # the small MLP and its 25-row table: nothing to gain elsewhere
# The transcript's `scalar=` for each (arithmetic, dtype); ieee is binary32 only.
SCALAR_NAMES = {
    ("native", "float32"): "Float32",
    ("native", "float64"): "Float64",
    ("ieee", "float32"): "IEEE32Exec",
}
DTYPE_NAMES = ("float32", "float64")  # the run's torch dtype: getattr(torch, name)
DEFAULT_TABLE = TableDir(DEFAULT_DIR)


@dataclass(frozen=True)
class RuntimeSettings:
    """The run's device and arithmetic; the defaults are the chapter's (`cpu`, `native`)."""

    device: str = setting("cpu", "device the model runs on", choices=DEVICES)
    arithmetic: str = setting(
        "native", "native: the backend's float arithmetic; ieee: strict IEEE-754 binary32", choices=ARITHMETICS
    )

    def __post_init__(self) -> None:
        check_settings(self)


def check_arithmetic(arithmetic: str, dtype_name: str) -> None:
    """`ieee` is binary32: a float64 run cannot be one (a SettingError naming --arithmetic)."""
    if (arithmetic, dtype_name) not in SCALAR_NAMES:
        raise SettingError(
            "arithmetic", f"{arithmetic} is IEEE-754 binary32; it needs --dtype float32, got {dtype_name}"
        )


def scalar_name(arithmetic: str, dtype_name: str) -> str:
    """`Float32`, `Float64` or `IEEE32Exec`, as the transcript's steps line prints it."""
    check_arithmetic(arithmetic, dtype_name)
    return SCALAR_NAMES[(arithmetic, dtype_name)]


@dataclass(frozen=True)
class CsvOptions:
    """How lines become cells; the defaults are those of the reference `CsvOptions`."""

    delimiter: str = setting(",", "cell delimiter, one character")
    skip_header: bool = setting(False, "drop the first line")
    trim_cells: bool = setting(True, "trim ASCII whitespace around rows and cells")
    allow_empty_lines: bool = setting(True, "skip blank lines instead of rejecting them")

    def __post_init__(self) -> None:
        check_settings(self)
        if len(self.delimiter) != 1:
            raise SettingError("delimiter", f"must be exactly one character, got {self.delimiter!r}")


@dataclass(frozen=True)
class RegressionTrainConfig:
    """What `data-csv`/`data-npy` train with; each field is a flag and a config key of both.

    `steps` has no default here: each command declares its own (a subclass redeclaring it)."""

    steps: int = setting(help="Adam updates (batch k mod N at step k)", minimum=0)
    batch: int = setting(5, "rows per batch, last partial batch dropped", above=0)
    seed: int = setting(0, "seeds the MLP initialisation and the shuffle")
    lr: float = setting(0.05, "Adam learning rate", minimum=0)
    dtype: str = setting("float32", "arithmetic of every input and target", choices=DTYPE_NAMES)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class SmallDataConfig:
    """`gptlineage small-data` has no settings: the table is fixed (a 5x5 grid, 25 rows)."""


@dataclass(frozen=True)
class CsvTraining(RegressionTrainConfig):
    """The training of `data-csv`: RegressionTrainConfig with this command's default steps."""

    steps: int = setting(30, "Adam updates (batch k mod N at step k)", minimum=0)


@dataclass(frozen=True)
class NpyTraining(RegressionTrainConfig):
    """The training of `data-npy`: RegressionTrainConfig with this command's default steps."""

    steps: int = setting(20, "Adam updates (batch k mod N at step k)", minimum=0)


@dataclass(frozen=True)
class TableCsvOptions(CsvOptions):
    """CsvOptions for the regression table, whose first line is its header `x1,x2,y`."""

    skip_header: bool = setting(True, "drop the first line (the table has a header)")


@dataclass(frozen=True)
class DataCsvConfig:
    """Everything `gptlineage data-csv` reads: the training, the CSV grammar and the file."""

    training: CsvTraining
    options: TableCsvOptions
    runtime: RuntimeSettings
    csv: Path = setting(DEFAULT_TABLE.csv, "regression CSV with columns x1,x2,y")

    def __post_init__(self) -> None:
        check_arithmetic(self.runtime.arithmetic, self.training.dtype)

    def parameters(self) -> dict[str, Any]:
        """The settings recorded in the artifact (the file is recorded as an input, by its hash)."""
        return {**as_mapping(self.training), **as_mapping(self.options), **as_mapping(self.runtime)}


@dataclass(frozen=True)
class DataNpyConfig:
    """Everything `gptlineage data-npy` reads: the training and the two arrays."""

    training: NpyTraining
    runtime: RuntimeSettings
    x: Path = setting(DEFAULT_TABLE.x, "inputs, shape (N, 2)")
    y: Path = setting(DEFAULT_TABLE.y, "targets, shape (N, 1)")

    def __post_init__(self) -> None:
        check_arithmetic(self.runtime.arithmetic, self.training.dtype)

    def parameters(self) -> dict[str, Any]:
        """The settings recorded in the artifact (the arrays are recorded as inputs, by their hashes)."""
        return {**as_mapping(self.training), **as_mapping(self.runtime)}
