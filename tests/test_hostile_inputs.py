"""Hostile inputs and outputs, as a table: (command line, prepared bad input, words the error must hold).

For every row the command must exit non-zero with exactly one stderr line `error: <command>: ...`
and no traceback, and leave every file as it was: nothing created or changed in the test's
directory or in the shared training chain, and the artifact already at `--output` (copied in
before the run) byte-identical. Commands run in-process through `gptlineage.cli.main`.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import TINY_TRAIN

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.core.jsonio import read_json
from gptlineage.core.settings import SettingError, from_mapping
from gptlineage.corpus.shards import ShardWriter, read_tokens
from gptlineage.generation.source import ModelSource, model_dimensions
from gptlineage.lineage.artifact import read_manifest
from gptlineage.lineage.outputs import HOST_TAG
from gptlineage.model.gpt import GPT
from gptlineage.model.parameters import save_parameters
from gptlineage.tabular.tutorial import DataCsvConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

SMALL = "small_regression"
TINY_MODEL = ["--preset", "quick", "--context", "96", "--width", "8", "--heads", "2", "--layers", "1"]


@dataclass
class Env:
    """Where a case prepares its bad input: `tmp` (snapshotted), the small-data table, the chain."""

    tmp: Path
    small: Path
    chain: Path
    nan_params: Path

    @property
    def out(self) -> Path:
        return self.tmp / "out"

    def copy(self, source: Path, name: str) -> Path:
        target = self.tmp / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, target)
        return target

    def write(self, name: str, data: bytes | str) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("small") / "small_data"
    assert main(["small-data", "--output", str(output)]) == 0
    return output


@pytest.fixture(scope="module")
def nan_params(tmp_path_factory) -> Path:
    """GPT-2-vocabulary weights, all NaN, for the TINY_MODEL dimensions."""
    model = GPT(model_dimensions(ModelSource(random_init=True, **flag_values(TINY_MODEL))), seed=0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
    return save_parameters(tmp_path_factory.mktemp("nan") / "nan.safetensors", model)


def flag_values(flags: list[str]) -> dict:
    pairs = zip(flags[::2], flags[1::2])
    return {name[2:]: value if name == "--preset" else int(value) for name, value in pairs}


def snapshot(*roots: Path) -> dict[str, str]:
    """Every file (its sha256) and directory under the roots, hidden ones included."""
    found = {}
    for root in roots:
        for directory, _, files in os.walk(root):
            found[directory] = "dir"
            for name in files:
                path = Path(directory) / name
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def run_main(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        status = main(argv)
    except SystemExit as exit_info:  # argparse's one-line errors
        status = exit_info.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# ---------------------------------------------------------------- the cases


def data_csv(env: Env, *flags: str, csv: Path | None = None) -> list[str]:
    csv = csv or env.small / f"{SMALL}.csv"
    return ["data-csv", "--csv", str(csv), "--steps", "2", *flags]


def data_npy(env: Env, x: Path, y: Path | None = None) -> list[str]:
    y = y or env.small / f"{SMALL}_y.npy"
    return ["data-npy", "--x", str(x), "--y", str(y), "--steps", "2", "--output", str(env.out)]


def prepare(env: Env, name: str, data: bytes | str) -> list[str]:
    return ["prepare", "--input", str(env.write(name, data)), "--output", str(env.out)]


def gzipped_rows(count: int) -> bytes:
    return gzip.compress(b"".join(b'{"text": "line %d of a play"}\n' % i for i in range(count)))


def npy_claiming_rows(env: Env, name: str, width: int, rows: int) -> Path:
    """An NPY file whose header says `rows` rows but whose data holds 25."""
    path = env.tmp / name
    np.save(path, np.zeros((25, width), dtype=np.float32), allow_pickle=False)
    data = path.read_bytes()
    header_end = data.index(b"\n") + 1
    header = data[:header_end].replace(b"(25, ", f"({rows}, ".encode())
    header = header.replace(b" " * (len(header) - header_end) + b"\n", b"\n")  # keep the padded length
    path.write_bytes(header + data[header_end:])
    return path


def npy_with(env: Env, name: str, row: int, column: int, value: float, dtype=np.float32) -> Path:
    array = np.load(env.small / f"{SMALL}_X.npy").astype(dtype)
    array[row, column] = value
    path = env.tmp / name
    np.save(path, array, allow_pickle=False)
    return path


def csv_with_row(env: Env, line: int, text: str) -> Path:
    lines = (env.small / f"{SMALL}.csv").read_bytes().split(b"\r\n")
    lines[line] = text.encode()
    return env.write("table.csv", b"\r\n".join(lines))


def select_best(env: Env, edit: Callable[[Path], None]) -> list[str]:
    """select-best over a copy of the chain's first training run, edited first."""
    run = env.copy(env.chain / "stage1", "run")
    edit(run)
    return ["select-best", "--run", str(run), "--output", str(env.out)]


def generate_nan(env: Env, *flags: str) -> list[str]:
    model = ["--load-params", str(env.nan_params), *TINY_MODEL]
    return ["generate", *model, "--prompt", "hi", "--generate", "3", *flags, "--output", str(env.out)]


def flipped(env: Env, source: Path) -> Path:
    """A copy of an artifact whose parameters.safetensors has one byte flipped."""
    copy = env.copy(source, "flipped")
    weights = copy / "parameters.safetensors"
    data = bytearray(weights.read_bytes())
    data[-5] ^= 0xFF
    weights.write_bytes(bytes(data))
    return copy


def damaged_shards(env: Env) -> Path:
    corpus = env.copy(env.chain / "corpus", "corpus")
    data = bytearray((corpus / "train.bin").read_bytes())
    data[0] ^= 0x17  # the magic's first byte; version and count still match the file
    (corpus / "train.bin").write_bytes(bytes(data))
    return corpus


def foreign_directory(env: Env, manifest: str) -> Path:
    env.write("app/manifest.json", manifest)
    env.write("app/data.txt", "not yours to delete\n")
    return env.tmp / "app"


@dataclass(frozen=True)
class Case:
    name: str
    argv: Callable[[Env], list[str]]
    words: tuple[str, ...]
    keeps_output: bool = True  # an artifact is at --output before the run (and must stay as it was)
    status: int = 1
    allowed: tuple[str, ...] = ()  # names the command may leave beside its output, by design


CASES = [
    # A. never delete or overwrite what is not ours
    Case("output-foreign-manifest", lambda e: data_csv(e, "--output", str(foreign_directory(e, "{}"))),
         ("app", "exists and is not an artifact", "refusing to replace it"), keeps_output=False),
    Case("output-other-schema", lambda e: data_csv(e, "--output", str(foreign_directory(e, '{"schema": "x", "id": "y"}'))),
         ("app", "is not an artifact"), keeps_output=False),
    Case("output-is-a-file", lambda e: data_csv(e, "--output", str(e.write("plain.txt", "mine\n"))),
         ("plain.txt", "exists and is not a directory"), keeps_output=False),
    Case("output-parent-is-a-file", lambda e: data_csv(e, "--output", str(e.write("plain.txt", "mine\n") / "out")),
         ("plain.txt is not a directory",), keeps_output=False),
    Case("failed-run-removes-created-parents",
         lambda e: data_csv(e, "--output", str(e.tmp / "new/deep/out"), csv=csv_with_row(e, 3, "1e300,0.5,0.1")),
         ("table.csv", "csv row 3, col 1", "float32 range"), keeps_output=False),
    Case("plots-run-dot-dot", lambda e: ["plots", "--run", str(e.chain / "stage1" / ".."), "--output", str(e.out)],
         ("metrics.json", "missing")),
    # B. one line instead of a traceback
    Case("lr-nan", lambda e: data_csv(e, "--lr", "nan", "--output", str(e.out)), ("--lr must be finite, got nan",)),
    Case("lr-inf", lambda e: data_csv(e, "--lr", "inf", "--output", str(e.out)), ("--lr must be finite, got inf",)),
    Case("lr-negative", lambda e: data_csv(e, "--lr", "-1", "--output", str(e.out)), ("--lr must be >= 0, got -1.0",)),
    Case("seed-huge", lambda e: data_csv(e, "--seed", "9" * 23, "--output", str(e.out)),
         ("--seed must be in 0..9223372036854775807",)),
    Case("seed-negative", lambda e: data_csv(e, "--seed", "-1", "--output", str(e.out)), ("--seed must be in 0..", "got -1")),
    Case("prepare-empty-jsonl", lambda e: prepare(e, "empty.jsonl", ""), ("empty.jsonl", "holds no rows")),
    Case("prepare-malformed-jsonl", lambda e: prepare(e, "bad.jsonl", '{"text": "a"}\n{"text": oops}\n'),
         ("bad.jsonl", "line 2", "not valid JSON")),
    Case("prepare-truncated-gz", lambda e: prepare(e, "cut.jsonl.gz", gzipped_rows(3000)[:4000]),
         ("cut.jsonl.gz", "truncated", "after line")),
    Case("prepare-fake-gz", lambda e: prepare(e, "fake.jsonl.gz", '{"text": "plain"}\n'), ("fake.jsonl.gz", "not a gzip file")),
    Case("prepare-garbage-parquet", lambda e: prepare(e, "junk.parquet", b"PAR1" + b"junk" * 20),
         ("junk.parquet", "not a readable Parquet file")),
    Case("prepare-text-not-utf8", lambda e: prepare(e, "bad.txt", b"fine\nstill fine\nbad \xff byte\n"),
         ("bad.txt", "line 3", "not UTF-8")),
    Case("prepare-missing-hf-path", lambda e: ["prepare", "--hf-dataset", str(e.tmp / "nowhere"), "--output", str(e.out)],
         ("--hf-dataset", "nowhere", "no such local dataset directory")),
    Case("npy-claims-1e15-rows",
         lambda e: data_npy(e, npy_claiming_rows(e, "X.npy", 2, 10**15), npy_claiming_rows(e, "y.npy", 1, 10**15)),
         ("X.npy", "NPY data truncated")),
    Case("prompt-suite-directory",
         lambda e: ["prompt-suite", "--run", str(e.chain / "stage1"), "--suite", str(e.tmp), "--output", str(e.out)],
         ("is a directory",)),
    Case("select-best-metrics-object", lambda e: select_best(e, lambda r: (r / "metrics.json").write_text("{}")),
         ("metrics.json", "no list under 'points'")),
    Case("select-best-metrics-list", lambda e: select_best(e, lambda r: (r / "metrics.json").write_text("[]")),
         ("metrics.json", "no list under 'points'")),
    Case("select-best-step-abc-only",
         lambda e: select_best(e, lambda r: (r / "checkpoints/step-5").rename(r / "checkpoints/step-abc")),
         ("no saved checkpoint after step 0",)),
    Case("generate-sampling-nan-logits", lambda e: generate_nan(e), ("non-finite logits at generated token 0",)),
    Case("generate-greedy-nan-logits", lambda e: generate_nan(e, "--top-k", "1"), ("non-finite logits at generated token 0",)),
    # C. corrupt data is refused, not consumed
    Case("generate-flipped-weights",
         lambda e: ["generate", "--run", str(flipped(e, e.chain / "best_stage1")), "--prompt", "hi", "--output", str(e.out)],
         ("flipped/parameters.safetensors", "sha256 differs from the manifest")),
    Case("cache-check-flipped-weights",
         lambda e: ["cache-check", "--run", str(flipped(e, e.chain / "stage1")), "--output", str(e.out)],
         ("flipped/parameters.safetensors", "sha256 differs from the manifest")),
    Case("npy-nan", lambda e: data_npy(e, npy_with(e, "Xnan.npy", 3, 1, np.nan)),
         ("Xnan.npy", "npy row 4, col 2", "nan is not a finite number")),
    Case("npy-inf", lambda e: data_npy(e, npy_with(e, "Xinf.npy", 0, 0, -np.inf)), ("Xinf.npy", "npy row 1, col 1", "-inf")),
    Case("npy-beyond-float32", lambda e: data_npy(e, npy_with(e, "Xbig.npy", 4, 0, 1e300, np.float64)),
         ("Xbig.npy", "npy row 5, col 1", "outside the finite float32 range")),
    Case("csv-beyond-float32", lambda e: data_csv(e, "--output", str(e.out), csv=csv_with_row(e, 3, "0.5,1e300,0.1")),
         ("table.csv", "csv row 3, col 2", "1e+300", "float32 range")),
    Case("shard-damaged-magic",
         lambda e: ["train", *TINY_TRAIN, "--data", str(damaged_shards(e)), "--steps", "2", "--output", str(e.out)],
         ("train.bin", "damaged llm.c header"), allowed=(".out.work",)),
    # existing diagnostics, for the record
    Case("csv-not-a-number", lambda e: data_csv(e, "--output", str(e.out), csv=csv_with_row(e, 2, "0.5,abc,0.1")),
         ("table.csv", "csv row 2, col 2", "unparsed suffix: abc")),
    Case("npy-missing", lambda e: data_npy(e, e.tmp / "absent.npy"), ("missing NPY array", "absent.npy")),
    Case("prepare-missing-input", lambda e: ["prepare", "--input", str(e.tmp / "absent.jsonl"), "--output", str(e.out)],
         ("absent.jsonl", "does not exist")),
    Case("prepare-missing-column", lambda e: prepare(e, "rows.jsonl", '{"body": "a"}\n'), ("document 0 has no column named 'text'",)),
    Case("bad-flag", lambda e: data_csv(e, "--steps", "many", "--output", str(e.out)), ("--steps", "invalid int"), status=2),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_input_is_one_line_and_changes_nothing(case, tmp_path, small, tiny_chain, nan_params, capsys):
    env = Env(tmp_path, small, tiny_chain, nan_params)
    argv = case.argv(env)
    if case.keeps_output:
        shutil.copytree(small, env.out)  # an artifact already there: a failed run must not touch it
    before = snapshot(tmp_path, tiny_chain)
    status, _, err = run_main(argv, capsys)
    assert status == case.status != 0
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {argv[0]}: "), err
    assert "Traceback" not in err
    for word in case.words:
        assert word in lines[0], lines[0]
    after = {path: kind for path, kind in snapshot(tmp_path, tiny_chain).items()}
    for name in case.allowed:  # by design, e.g. the resumable work directory of `train`
        after = {path: kind for path, kind in after.items() if name not in Path(path).parts}
    assert after == before


# ---------------------------------------------------------------- outputs that succeed


def test_a_fresh_output_gets_its_missing_parents(small, tmp_path, capsys):
    output = tmp_path / "a" / "b" / "out"
    assert main(["data-csv", "--csv", str(small / f"{SMALL}.csv"), "--steps", "1", "--output", str(output)]) == 0
    assert read_manifest(output)["command"]["name"] == "data-csv"
    assert sorted(p.name for p in output.parent.iterdir()) == ["out"]


def test_an_existing_artifact_is_replaced(small, tmp_path, capsys):
    output = tmp_path / "out"
    shutil.copytree(small, output)
    assert main(["data-csv", "--csv", str(small / f"{SMALL}.csv"), "--steps", "1", "--output", str(output)]) == 0
    assert read_manifest(output)["command"]["name"] == "data-csv"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_plots_write_only_under_the_output(tiny_chain, tmp_path, capsys):
    output = tmp_path / "plots"
    before = snapshot(tiny_chain)
    assert main(["plots", "--run", str(tiny_chain / "stage1" / ".." / "stage1"), "--output", str(output)]) == 0
    assert sorted(p.relative_to(output).as_posix() for p in output.rglob("*.svg")) == [
        "overview.svg",
        "stage1/loss.svg",
        "stage1/profile.svg",
    ]
    assert snapshot(tiny_chain) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots"]


def dead_pid() -> int:
    process = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    return int(process.stdout)


def test_a_killed_run_leaves_a_temporary_that_the_next_run_removes(small, tmp_path, capsys):
    output = tmp_path / "out"
    killed = (
        "import os, signal, sys\n"
        "from gptlineage.lineage.artifact import ArtifactWriter\n"
        "with ArtifactWriter(sys.argv[1], command='data-csv', parameters={}) as artifact:\n"
        "    (artifact.path / 'half.txt').write_text('half')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    environment = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    subprocess.run([sys.executable, "-c", killed, str(output)], env=environment, check=False)
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(f".out.tmp-{HOST_TAG}-")
    # Look-alikes that are not ours, or whose process lives (pid 1), are kept.
    kept = [f".out.tmp-{HOST_TAG}-1", ".out.tmp-x", ".out.tmp-12x", ".outer.tmp-5", f".out.tmp-otherhost-{dead_pid()}"]
    for name in kept:
        (tmp_path / name).mkdir()
    (tmp_path / f".out.tmp-{dead_pid()}").mkdir()  # the form without the host stands for this host
    assert main(["data-csv", "--csv", str(small / f"{SMALL}.csv"), "--steps", "1", "--output", str(output)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", *kept])


def test_an_artifact_retired_by_a_cut_short_swap_comes_back(small, tmp_path, capsys):
    """A run killed between its two renames left the old artifact aside and none in place."""
    output = tmp_path / "out"
    shutil.copytree(small, tmp_path / f".out.old-{HOST_TAG}-{dead_pid()}")
    bad = tmp_path / "bad.csv"
    bad.write_text("x1,x2,y\n1e300,0,0\n")
    status, _, err = run_main(["data-csv", "--csv", str(bad), "--batch", "1", "--output", str(output)], capsys)
    assert status == 1 and "value 1e+300" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "out"]
    assert contents(output) == contents(small)  # the old artifact, back in place, byte for byte


def contents(root: Path) -> dict[str, bytes]:
    return {path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()}


# ---------------------------------------------------------------- the layers below the commands


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"lr": float("nan")}, "--lr must be finite, got nan"),
        ({"lr": float("inf")}, "--lr must be finite, got inf"),
        ({"seed": 2**63}, "--seed must be in 0..9223372036854775807, got 9223372036854775808"),
        ({"steps": 2**64}, "--steps must be in -9223372036854775808..9223372036854775807, got 18446744073709551616"),
    ],
)
def test_config_values_like_yaml_nan_are_refused(values, message):
    with pytest.raises(SettingError) as error:
        from_mapping(DataCsvConfig, values)
    assert str(error.value) == message


def test_a_damaged_llmc_magic_is_refused_but_headerless_shards_still_read(tmp_path):
    path = tmp_path / "train.bin"
    with ShardWriter(path) as writer:
        writer.write(np.arange(600, dtype=np.uint16))
    data = bytearray(path.read_bytes())
    data[1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(GptlineageError, match="damaged llm.c header"):
        read_tokens(path)
    raw = tmp_path / "raw.bin"
    with ShardWriter(raw, fmt="raw") as writer:
        writer.write(np.arange(600, dtype=np.uint16))
    assert read_tokens(raw).tolist() == list(range(600))


def test_a_directory_given_as_a_json_file_is_one_line(tmp_path):
    (tmp_path / "suite.json").mkdir()
    with pytest.raises(GptlineageError, match="suite.json: is a directory, not a JSON file"):
        read_json(tmp_path / "suite.json")


def test_a_crafted_passport_asking_for_a_huge_model_is_refused_before_allocating(tmp_path, capsys):
    run = tmp_path / "crafted"
    run.mkdir()
    model = {"context": 16, "vocab": 50257, "width": 2**20, "heads": 1, "layers": 2}
    (run / "passport.json").write_text(json.dumps({"model": model}))
    assert main(["generate", "--run", str(run), "--message", "hi"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: generate: ") and "passport.json" in err[0]
    assert "width 1048576" in err[0] and "GiB" in err[0]


def test_a_memory_limit_is_a_guard_not_part_of_the_work():
    from gptlineage.core.settings import work_parameters
    from gptlineage.training.config import RuntimeSettings, TrainConfig

    limited = TrainConfig(runtime=RuntimeSettings(max_memory=64.0))
    assert work_parameters(limited) == work_parameters(TrainConfig())
