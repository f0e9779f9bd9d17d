"""The tabular chapter's two tutorials, `data-csv` and `data-npy`: their settings, transcript and artifact.

Both train Linear(2,8) -> ReLU -> Linear(8,1) with Adam on the regression table, print the
chapter's transcript, and write it with a TrainLog JSON as an artifact.

Example:
    gptlineage data-csv --seed 2026 --steps 5 --output results/data_csv
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.core.settings import as_mapping
from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.lineage.locations import store_path
from gptlineage.tabular.csv_loader import from_csv
from gptlineage.tabular.dataset import Dataset, batch
from gptlineage.tabular.npy_loader import check_supervised_npy, from_supervised_npy
from gptlineage.tabular.regression import (
    model_summary_lines,
    train_regression,
    transcript_train_lines,
    write_regression_trainlog,
)
from gptlineage.tabular.settings import DataCsvConfig, DataNpyConfig, RegressionTrainConfig, RuntimeSettings

INPUT_WIDTH = 2  # x1, x2
TARGET_WIDTH = 1  # y
SMALL_DATA_HINT = (
    "generate it with: snakemake --cores 1 results/small_data (or gptlineage small-data --output results/small_data)"
)


def trainlog_notes(parameters: dict[str, Any]) -> list[str]:
    """`name=value` for each parameter; device and arithmetic only where they are not the defaults (so a
    default run writes the TrainLog it wrote before these two settings existed)."""
    defaults = as_mapping(RuntimeSettings())
    return [f"{name}={value}" for name, value in parameters.items() if name not in defaults or defaults[name] != value]


def header_lines(
    title: str, config: RegressionTrainConfig, data_dir: Path, paths: list[tuple[str, Path]], label_width: int
) -> list[str]:
    """The transcript up to the train line: title, model summary, data paths, seed, optimiser; labels
    padded to `label_width` as in the chapter's transcripts (9 for CSV, 8 for NPY)."""
    # A store's file as the store names it (s3://...), not by the job's local copy of it.
    settings = [*((name, store_path(str(path))) for name, path in paths), ("seed", config.seed)]
    lines = [f"== {title} ==", "model:", *model_summary_lines(config.batch), f"data_dir = {store_path(str(data_dir))}"]
    lines += [f"{name.ljust(label_width)} = {value}" for name, value in settings]
    lines.append(
        f"{'train'.ljust(label_width)} = Adam(lr={config.lr}), steps={config.steps}, batch_size={config.batch},"
        " shuffle=true, drop_last=true"
    )
    return lines


def train_and_write(
    *,
    command: str,
    title: str,
    dataset: Dataset,
    config: RegressionTrainConfig,
    runtime: RuntimeSettings,
    transcript: list[str],
    parameters: dict,
    inputs: dict[str, Path],
    output: Path,
) -> None:
    """Train, print the result lines, and write trainlog.json and transcript.txt as one artifact."""
    with ArtifactWriter(output, command=command, parameters=parameters, inputs=inputs) as artifact:
        result = train_regression(dataset, config, runtime.arithmetic)
        result_lines = transcript_train_lines(result, config.dtype, runtime.arithmetic)
        print("\n".join(result_lines))
        write_regression_trainlog(artifact.path / "trainlog.json", result, title, trainlog_notes(parameters))
        (artifact.path / "transcript.txt").write_text("\n".join(transcript + result_lines) + "\n", encoding="utf-8")
    print(f"  wrote TrainLog JSON: {output / 'trainlog.json'}")


def csv_tutorial(config: DataCsvConfig, output: Path) -> None:
    """Print the CSV transcript, train on the table read from CSV, and write the artifact."""
    training, csv = config.training, config.csv
    transcript = header_lines("CSV loader training tutorial", training, csv.parent, [("csv_path", csv)], 9)
    print("\n".join(transcript), flush=True)
    if not csv.is_file():
        raise GptlineageError(f"missing CSV dataset: {csv} ({SMALL_DATA_HINT})")
    dataset = from_csv(
        csv, training.batch, INPUT_WIDTH, TARGET_WIDTH, options=config.options, shuffle=True, seed=training.seed
    )
    train_and_write(
        command="data-csv",
        title="small regression (CSV)",
        dataset=dataset,
        config=training,
        runtime=config.runtime,
        transcript=transcript,
        parameters=config.parameters(),
        inputs={"csv": csv},
        output=output,
    )


def npy_tutorial(config: DataNpyConfig, output: Path) -> None:
    """Print the NPY transcript and the arrays' headers, train on them, and write the artifact."""
    training, x, y = config.training, config.x, config.y
    transcript = header_lines("NPY loader training tutorial", training, x.parent, [("x_path", x), ("y_path", y)], 8)
    print("\n".join(transcript), flush=True)
    for path in (x, y):
        if not path.is_file():
            raise GptlineageError(f"missing NPY array: {path} ({SMALL_DATA_HINT})")
    x_header, y_header = check_supervised_npy(x, y, INPUT_WIDTH, TARGET_WIDTH)
    described = [
        f"X.npy dtype={x_header.dtype} shape={tuple(x_header.shape)}",
        f"y.npy dtype={y_header.dtype} shape={tuple(y_header.shape)}",
    ]
    print("\n".join(described), flush=True)
    samples = from_supervised_npy(x, y, INPUT_WIDTH, TARGET_WIDTH)
    dataset = batch(samples, training.batch, shuffle=True, seed=training.seed)
    train_and_write(
        command="data-npy",
        title="small regression (NPY)",
        dataset=dataset,
        config=training,
        runtime=config.runtime,
        transcript=transcript + described,
        parameters=config.parameters(),
        inputs={"x": x, "y": y},
        output=output,
    )
