"""The settings of each `gptlineage lineage ACTION`: one frozen dataclass per action, its flags
made by `gptlineage.core.settings.add_flags` (help and defaults come from the fields) and checked as
it is built, so a bad value is one line naming its flag.

Example:
    add_flags(parser, VerifySettings)     # PATH, --expect-id ID, --expect-content SHA256, --sources DIR
    settings = from_args(VerifySettings, parser.parse_args(["results/data_csv"]))
    VerifySettings(Path("x"), expect_id="abc")   # SettingError: --expect-id 'abc' is not an artifact id ...
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gptlineage.core.errors import printable
from gptlineage.core.settings import SettingError, check_settings, output_setting, setting
from gptlineage.lineage.checks import is_hex64

MLFLOW = "mlflow"  # `lineage export mlflow RESULTS`: the word before the tree names the format
FORMATS = ("prov-json", "ro-crate", MLFLOW)
MLFLOW_EXPERIMENT = "gptlineage"  # the MLflow experiment the runs go into unless --experiment-name names one
PATH_HELP = "an artifact directory, or a file inside one"
PAGE = "holds index.html"
# How a result is printed: text, or another form, each its own flag (`--json`, `--md`: "print JSON").
PRINT = "print"


def check_artifact_ids(settings: Any, *names: str) -> None:
    """Each of NAMES that is set must be an id or a content hash: 64 lowercase hex digits."""
    for name in names:
        value = getattr(settings, name)
        if value is not None and not is_hex64(value):
            raise SettingError(name, f"{printable(value)!r} is not an artifact id (64 lowercase hex digits)")


@dataclass(frozen=True)
class ShowSettings:
    """`lineage show`: the artifact whose tree to print, compact or in full."""

    path: Path = setting(help=PATH_HELP, positional=True)
    full: bool = setting(False, "every artifact's command line, parameters, code, run, files and inputs, unfolded")

    def __post_init__(self) -> None:
        check_settings(self)


SOURCES_HELP = "look here, by content, for source files a copied or moved tree no longer finds where they were recorded (repeatable)"


def check_source_directories(sources: tuple[Path, ...]) -> None:
    """--sources names directories here (checked when the action runs: building settings reads no disk)."""
    for directory in sources:
        if not directory.is_dir():
            raise SettingError("sources", f"{directory}: no such directory")


@dataclass(frozen=True)
class VerifySettings:
    """`lineage verify`: the artifact to rehash, the hashes pinned, where moved sources lie."""

    path: Path = setting(help=PATH_HELP, positional=True)
    expect_id: str | None = setting(
        None,
        "fail unless PATH's artifact has this id (64 hex digits): a pinned id notices a chain re-hashed by hand",
        metavar="ID",
    )
    expect_content: str | None = setting(
        None,
        "fail unless PATH's artifact holds exactly the files this content_sha256 (64 hex digits) names",
        metavar="SHA256",
    )
    sources: tuple[Path, ...] = setting((), SOURCES_HELP, metavar="DIR")

    def __post_init__(self) -> None:
        check_settings(self)
        check_artifact_ids(self, "expect_id", "expect_content")


@dataclass(frozen=True)
class ExportSettings:
    """`lineage export`: the artifact, the standard format and where it goes."""

    path: Path = setting(help=PATH_HELP, positional=True)
    format: str = setting(
        "prov-json",
        "prov-json (W3C PROV-JSON, one file), ro-crate (a Workflow Run RO-Crate directory) or mlflow "
        "(a run per artifact of the tree PATH, at --tracking-uri; also spelled `export mlflow RESULTS`)",
        choices=FORMATS,
    )
    output: Path | None = setting(
        None, "file (prov-json; default standard output) or directory (ro-crate, required) to write"
    )
    sources: bool = setting(
        True,
        "ro-crate: copy the source inputs (files outside the results tree) in; --no-sources leaves them out, "
        "the crate names them by sha256",
    )
    zip: bool = setting(False, "ro-crate: write the crate as one zip file at --output (FILE.zip), to hand over")
    results: tuple[Path, ...] = setting(
        (), "after the word mlflow: the results tree to export (`export mlflow RESULTS`)", positional=True
    )
    tracking_uri: str | None = setting(
        None, "mlflow: the MLflow tracking store (sqlite:///FILE, http://HOST:PORT)", metavar="URI"
    )
    experiment_name: str = setting(
        MLFLOW_EXPERIMENT, "mlflow: the MLflow run group (MLflow's experiment_name) the runs go into", metavar="NAME"
    )

    @property
    def mlflow_tree(self) -> Path | None:
        """The results tree to put into MLflow (`export mlflow RESULTS` or `export RESULTS --format mlflow`)."""
        if self.results:
            return self.results[0]
        return self.path if self.format == MLFLOW else None

    def __post_init__(self) -> None:
        check_settings(self)
        if self.results and (str(self.path) != MLFLOW or len(self.results) != 1):
            raise SettingError("results", "one results tree, after the word mlflow: export mlflow RESULTS", whole=True)
        if self.results and self.format not in ("prov-json", MLFLOW):
            raise SettingError("format", "export mlflow RESULTS writes to MLflow; leave --format out", whole=True)
        if (self.mlflow_tree is None) != (self.tracking_uri is None):
            raise SettingError(
                "tracking_uri", "--tracking-uri URI goes with (and only with) export mlflow RESULTS", whole=True
            )
        if self.mlflow_tree is None and self.experiment_name != MLFLOW_EXPERIMENT:
            raise SettingError("experiment_name", "goes with export mlflow RESULTS")
        if not self.experiment_name.strip() or len(self.experiment_name) > 500:  # MLflow's limits
            raise SettingError("experiment_name", "must be 1 to 500 characters, not blank")
        if self.tracking_uri is not None and not self.tracking_uri.strip():  # MLflow would take ./mlflow.db
            raise SettingError("tracking_uri", "is empty; name the store (sqlite:///FILE, http://HOST:PORT)")
        if self.mlflow_tree is not None and self.output is not None:
            raise SettingError("output", "goes with prov-json and ro-crate; mlflow writes to --tracking-uri")
        for flag, given in (("--no-sources", not self.sources), ("--zip", self.zip)):
            if given and self.format != "ro-crate":
                raise SettingError("format", f"{flag} applies to --format ro-crate only", whole=True)
        if self.format == "ro-crate" and self.output is None:
            raise SettingError("format", "ro-crate needs --output DIR (the crate is a directory)")
        if self.zip and self.output is not None and self.output.suffix != ".zip":
            raise SettingError("zip", f"--zip: --output {self.output} must name a .zip file", whole=True)


@dataclass(frozen=True)
class DiffSettings:
    """`lineage diff`: two versions of one stage, compared stage by stage."""

    a: Path = setting(help="an artifact (A, typically before a change)", positional=True)
    b: Path = setting(help="the same stage in another run (B)", positional=True)
    all: bool = setting(False, "every stage and every metric, not only what differs")
    form: str = setting("text", PRINT, choices=("text", "json", "md"), switches=True)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class TableSettings:
    """`lineage table`: one row per run (or per artifact of a stage), the columns that matter."""

    roots: tuple[Path, ...] = setting(
        (Path("results"),), "results trees or artifacts", positional=True, metavar="ROOTS"
    )
    stage: str | None = setting(None, "one row per artifact in directories of this name instead (id, metrics, date)")
    params: str = setting("", "comma-separated parameters to show as well (dotted or last part)")
    only_changed: bool = setting(False, "only the columns whose values differ between rows")
    columns: str = setting("", "comma-separated columns to show, in this order, named as in --csv (the first is kept)")
    sort: str | None = setting(None, "sort by this column, named as in --csv (empty cells last)", metavar="COLUMN")
    descending: bool = setting(False, "sort --sort's column from largest to smallest")
    form: str = setting("text", PRINT, choices=("text", "csv", "md", "json"), switches=True)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class CompareSettings:
    """`lineage compare`: the runs to set side by side (A first) and the folder of the page."""

    runs: tuple[Path, ...] = setting(help="artifacts to compare (A B [C ...]), A first", positional=True, metavar="RUN")
    output: Path = output_setting(PAGE)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ReproduceSettings:
    """`lineage reproduce`: the artifact to rerun and how close its outputs must come."""

    path: Path = setting(help=PATH_HELP, positional=True)
    tolerance: float = setting(0.0, "accept numbers that differ by at most this much", minimum=0)
    with_current_code: bool = setting(False, "run even when the command's code changed; list the changes")
    sources: tuple[Path, ...] = setting((), SOURCES_HELP, metavar="DIR")
    form: str = setting("text", PRINT, choices=("text", "json"), switches=True)

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True, kw_only=True)
class RecordConfig:
    """`gptlineage record`: the artifacts and code files a command of one's own reads, where its
    artifact goes, and the command (the words after `--`)."""

    input: tuple[Path, ...] = setting((), "an artifact (or a file in one) the command reads (repeatable)")
    code: tuple[Path, ...] = setting((), "a file of the command's own code, under the working directory (repeatable)")
    output: Path = output_setting("what the command writes, and its manifest")
    user_command: tuple[str, ...] = setting(
        help="after --: the command to run (no shell); {output} in a word is the folder it writes",
        positional=True,
        metavar="COMMAND",
    )

    def __post_init__(self) -> None:
        check_settings(self)
