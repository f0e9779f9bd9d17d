"""`prepare`'s streamed path: ids equal to `encode_ordinary`, JSON Lines read as `datasets` reads them,
input order kept whatever the thread count, broken lines named."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.cli import main
from gptlineage.corpus import prepare as prepare_module
from gptlineage.corpus.prepare import PrepareConfig, TokenBudget, prepare
from gptlineage.corpus.sources import document_rows, round_robin_rows
from gptlineage.corpus.tokenizer import encode_ids, encode_stream, gpt2_encoding


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=60) | st.just("a <|endoftext|> b \ud800 c"))
def test_encode_ids_are_encode_ordinary(text: str) -> None:
    ids = encode_ids(text)
    assert ids.dtype.name == "uint16"
    assert ids.tolist() == gpt2_encoding().encode_ordinary(text)


def test_encode_stream_keeps_the_input_order_and_can_stop_early() -> None:
    texts = [f"document {i} " * (i % 7 + 1) for i in range(50)]
    encoded = [ids.tolist() for ids in encode_stream(iter(texts), threads=3)]
    assert encoded == [gpt2_encoding().encode_ordinary(text) for text in texts]
    stream = encode_stream(iter(texts), threads=2)
    assert next(stream).tolist() == encoded[0]
    stream.close()  # cancels the documents in flight without hanging


def test_token_budget_skips_then_cuts_across_documents() -> None:
    budget = TokenBudget(skip=3, limit=4)
    assert budget.take(np.arange(2)).tolist() == []
    assert budget.take(np.arange(5)).tolist() == [1, 2, 3, 4]
    assert budget.spent and budget.source == 7


def write_rows(path: Path, rows: list[object]) -> Path:
    lines = "".join((json.dumps(row) if not isinstance(row, str) else row) + "\n" for row in rows)
    path.write_bytes(gzip.compress(lines.encode()) if path.name.endswith(".gz") else lines.encode())
    return path


def test_json_lines_are_read_as_datasets_reads_them(tmp_path: Path) -> None:
    first = write_rows(tmp_path / "a.jsonl.gz", [{"text": f"a{i} ü", "n": i} for i in range(5)] + ["  "])
    second = write_rows(tmp_path / "b.jsonl", ["", {"text": "b0\n<|endoftext|>"}, {"text": "b1"}])
    config = PrepareConfig(input=(str(first), str(second), str(first)), skip_documents=3)
    ours = [row["text"] for row in document_rows(config)]
    assert ours == [row["text"] for row in round_robin_rows(config)]
    assert ours == ["a3 ü", "a4 ü", "b0\n<|endoftext|>", "b1"] + [f"a{i} ü" for i in range(5)]


def test_shards_do_not_depend_on_the_thread_count(tmp_path: Path, monkeypatch) -> None:
    rows = [{"text": f"row {i}: " + "word " * (i * 37 % 200)} for i in range(300)]
    source = write_rows(tmp_path / "docs.jsonl", rows)
    outputs = []
    for threads in (1, 3):
        monkeypatch.setattr(prepare_module, "available_cpus", lambda threads=threads: threads)
        output = tmp_path / f"threads{threads}"
        prepare(PrepareConfig(input=(str(source),), skip_tokens=5, max_tokens=20000, seed=2), output)
        outputs.append([(output / name).read_bytes() for name in ("train.bin", "val.bin")])
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"text": "a"}', "[1, 2]"], "rows.jsonl: line 2: not a JSON object (a list)"),
        (['{"text": "a"}', "", '{"text": 3}'], "document 1 column 'text' is not a string"),
        (["", " "], "rows.jsonl: holds no rows (empty file)"),
    ],
)
def test_a_bad_json_lines_row_is_one_line(tmp_path: Path, capsys, lines: list[str], message: str) -> None:
    source = write_rows(tmp_path / "rows.jsonl", lines)
    assert main(["prepare", "--input", str(source), "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: prepare: ")
    assert not (tmp_path / "out" / "train.bin").exists()
