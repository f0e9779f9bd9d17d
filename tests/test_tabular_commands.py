"""`small-data`, `data-csv` and `data-npy` as a user runs them: transcripts and error lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from gptlineage.cli import main

SMALL = "small_regression"


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("data") / "small_data"
    assert main(["small-data", "--output", str(output)]) == 0
    return output


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def result_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("mean_loss", "steps=", "predict", "dataset size"))]


def test_small_data_writes_the_table_and_says_so(small_data, capsys):
    files = sorted(path.name for path in small_data.iterdir())
    assert files == ["manifest.json", f"{SMALL}.csv", f"{SMALL}_X.npy", f"{SMALL}_y.npy"]
    status, out, _ = run_cli(capsys, "small-data", "--output", str(small_data.parent / "again"))
    assert status == 0
    assert f"{SMALL}.csv rows=25" in out
    assert f"{SMALL}_X.npy shape=(25, 2) dtype=float32" in out
    assert f"{SMALL}_y.npy shape=(25, 1) dtype=float32" in out


def test_data_csv_transcript(small_data, tmp_path, capsys):
    status, out, err = run_cli(
        capsys,
        "data-csv",
        "--csv",
        str(small_data / f"{SMALL}.csv"),
        "--seed",
        "2026",
        "--steps",
        "5",
        "--output",
        str(tmp_path / "out"),
    )
    assert status == 0, err
    lines = out.splitlines()
    assert lines[:6] == [
        "== CSV loader training tutorial ==",
        "model:",
        "Sequential: [5, 2] -> [5, 1], layers=3, params=33, state=33",
        "  [0] Linear(2, 8): [5, 2] -> [5, 8] params=24, state=24 [[8, 2], [8]]",
        "  [1] ReLU: [5, 8] -> [5, 8] params=0, state=0 []",
        "  [2] Linear(8, 1): [5, 8] -> [5, 1] params=9, state=9 [[1, 8], [1]]",
    ]
    assert "seed      = 2026" in lines
    assert "train     = Adam(lr=0.05), steps=5, batch_size=5, shuffle=true, drop_last=true" in lines
    results = result_lines(out)
    assert results[0] == "dataset size = 5"
    assert re.fullmatch(r"mean_loss\(before training\) = \d+\.\d{6}", results[1])
    before = float(results[1].split("= ")[1])
    after = float(results[2].split("= ")[1])
    assert after < before
    assert results[3] == f"steps=5 arithmetic=native scalar=Float32 loss={before:.6f} -> {after:.6f}"
    assert re.fullmatch(r"predict\(batch=heldout\) = \[(\[-?\d+\.\d{6}\](, )?){5}\]", results[4])
    trainlog = json.loads((tmp_path / "out" / "trainlog.json").read_text())
    assert list(trainlog) == ["title", "steps", "series", "notes"]
    assert trainlog["steps"] == [0, 5]
    assert trainlog["series"][0]["name"] == "loss"
    assert [round(v, 6) for v in trainlog["series"][0]["values"]] == [before, after]
    assert (tmp_path / "out" / "transcript.txt").read_text().splitlines()[-1] == results[4]


def test_same_seed_reproduces_every_digit_and_another_seed_changes_them(small_data, tmp_path, capsys):
    def transcript(seed: str, name: str) -> list[str]:
        status, out, err = run_cli(
            capsys,
            "data-csv",
            "--csv",
            str(small_data / f"{SMALL}.csv"),
            "--seed",
            seed,
            "--steps",
            "5",
            "--output",
            str(tmp_path / name),
        )
        assert status == 0, err
        return result_lines(out)

    first, second, other = transcript("2026", "a"), transcript("2026", "b"), transcript("7", "c")
    assert first == second
    assert first[1] != other[1] and first[2] != other[2] and first[4] != other[4]


def test_csv_and_npy_give_the_same_numbers_and_float64_differs(small_data, tmp_path, capsys):
    common = ["--seed", "2026", "--steps", "5"]
    _, csv_out, _ = run_cli(
        capsys, "data-csv", "--csv", str(small_data / f"{SMALL}.csv"), *common, "--output", str(tmp_path / "c")
    )
    status, npy_out, err = run_cli(
        capsys,
        "data-npy",
        "--x",
        str(small_data / f"{SMALL}_X.npy"),
        "--y",
        str(small_data / f"{SMALL}_y.npy"),
        *common,
        "--output",
        str(tmp_path / "n"),
    )
    assert status == 0, err
    assert "X.npy dtype=<f4 shape=(25, 2)" in npy_out and "y.npy dtype=<f4 shape=(25, 1)" in npy_out
    assert result_lines(csv_out) == result_lines(npy_out)
    _, f64_out, _ = run_cli(
        capsys,
        "data-csv",
        "--csv",
        str(small_data / f"{SMALL}.csv"),
        *common,
        "--dtype",
        "float64",
        "--output",
        str(tmp_path / "d"),
    )
    assert "scalar=Float64" in result_lines(f64_out)[3]


# ---- every bad input: one line naming the file, non-zero exit, no traceback, no artifact ----


def assert_clean_failure(status: int, err: str, output: Path, *needles: str) -> None:
    assert status != 0
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    assert not output.exists()
    assert not any(path.name.startswith(f".{output.name}.tmp") for path in output.parent.iterdir())


def csv_with(tmp_path: Path, small_data: Path, edit) -> Path:
    lines = (small_data / f"{SMALL}.csv").read_bytes().decode().split("\r\n")
    path = tmp_path / "edited.csv"
    path.write_bytes("\r\n".join(edit(lines)).encode())
    return path


def run_csv(capsys, csv: Path, output: Path, *extra: str) -> tuple[int, str, str]:
    return run_cli(capsys, "data-csv", "--csv", str(csv), "--steps", "3", "--output", str(output), *extra)


def test_missing_csv_names_the_file_and_the_command_that_makes_it(tmp_path, capsys):
    status, _, err = run_csv(capsys, tmp_path / "no-such-data.csv", tmp_path / "out")
    assert_clean_failure(
        status,
        err,
        tmp_path / "out",
        "error: data-csv: missing CSV dataset:",
        "no-such-data.csv",
        "gptlineage small-data",
    )


def test_non_numeric_cell_names_row_and_column(small_data, tmp_path, capsys):
    csv = csv_with(
        tmp_path, small_data, lambda lines: [lines[0], lines[1], lines[2].replace("-0.5", "oops", 1), *lines[3:]]
    )
    status, _, err = run_csv(capsys, csv, tmp_path / "out")
    assert_clean_failure(status, err, tmp_path / "out", str(csv), "csv row 2, col 2: unparsed suffix: oops")


def test_short_row_names_the_row(small_data, tmp_path, capsys):
    csv = csv_with(tmp_path, small_data, lambda lines: [lines[0], lines[1], "-1.0,-0.5", *lines[3:]])
    status, _, err = run_csv(capsys, csv, tmp_path / "out")
    assert_clean_failure(status, err, tmp_path / "out", str(csv), "csv row 2: expected 1 values for shape [1], got 0")


def test_blank_line_when_blank_lines_are_disallowed(small_data, tmp_path, capsys):
    csv = csv_with(tmp_path, small_data, lambda lines: [lines[0], lines[1], "", *lines[2:]])
    status, _, err = run_csv(capsys, csv, tmp_path / "out", "--no-allow-empty-lines")
    assert_clean_failure(status, err, tmp_path / "out", str(csv), "csv: row 2: empty line")
    status, _, err = run_csv(capsys, csv, tmp_path / "ok")  # allowed by default
    assert status == 0, err


def test_batch_larger_than_the_dataset_with_steps(small_data, tmp_path, capsys):
    status, _, err = run_csv(capsys, small_data / f"{SMALL}.csv", tmp_path / "out", "--batch", "30")
    assert_clean_failure(
        status, err, tmp_path / "out", "no training samples; check the dataset and batch size (including drop_last)"
    )


def run_npy(capsys, x: Path, y: Path, output: Path) -> tuple[int, str, str]:
    return run_cli(capsys, "data-npy", "--x", str(x), "--y", str(y), "--steps", "3", "--output", str(output))


@pytest.mark.parametrize(
    ("make_x", "message"),
    [
        (lambda X: X.astype(np.int32), "npy: unsupported dtype: <i4"),
        (lambda X: np.asfortranarray(X), "npy: prefix row loading requires C-order NPY arrays"),
        (lambda X: X[:, :1].copy(), "expected shape (N,2), got (25, 1)"),
        (lambda X: X[:20].copy(), "NPY row mismatch"),
    ],
    ids=["integer-dtype", "fortran-order", "wrong-width", "row-mismatch"],
)
def test_bad_npy_inputs(small_data, tmp_path, capsys, make_x, message):
    X = np.load(small_data / f"{SMALL}_X.npy", allow_pickle=False)
    x_path = tmp_path / "X_bad.npy"
    np.save(x_path, make_x(X), allow_pickle=False)
    status, _, err = run_npy(capsys, x_path, small_data / f"{SMALL}_y.npy", tmp_path / "out")
    assert_clean_failure(status, err, tmp_path / "out", "X_bad.npy", message)


def test_truncated_npy(small_data, tmp_path, capsys):
    x_path = tmp_path / "X_truncated.npy"
    x_path.write_bytes((small_data / f"{SMALL}_X.npy").read_bytes()[:-7])
    status, _, err = run_npy(capsys, x_path, small_data / f"{SMALL}_y.npy", tmp_path / "out")
    assert_clean_failure(status, err, tmp_path / "out", "X_truncated.npy", "NPY data truncated")


def test_bad_flag_is_one_line_with_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["data-csv", "--steps", "many", "--output", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--steps" in err and err.startswith("error: data-csv:")
    # A readable value out of range is a setting error: one line naming the flag, exit 1.
    assert main(["data-csv", "--batch", "0", "--output", str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == "error: data-csv: --batch must be positive, got 0\n"


def test_every_command_has_help_with_an_example(capsys):
    from gptlineage.interface.registry import command_names

    for name in command_names():
        with pytest.raises(SystemExit) as exit_info:
            main([name, "--help"])
        assert exit_info.value.code == 0
        assert f"example:\n  gptlineage {name}" in capsys.readouterr().out
