"""`gptlineage prepare`: sources, round-robin, limits, the per-document split, dialogues, errors."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
import yaml

from gptlineage.cli import main
from gptlineage.commands import prepare as prepare_command
from gptlineage.core.settings import from_args, from_mapping
from gptlineage.corpus.dialogue import encode_dialogue
from gptlineage.corpus.prepare import PrepareConfig, prepare
from gptlineage.corpus.shards import read_mask, read_records, read_tokens
from gptlineage.corpus.sources import hub_calls, is_validation, round_robin_rows
from gptlineage.corpus.synth_chat import write_chat_dataset
from gptlineage.corpus.tokenizer import EOT_ID, gpt2_encoding
from gptlineage.pipeline.slices import command_slice, flags

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def multi_split(tmp_path: Path) -> Path:
    """A local dataset directory with three named splits of unequal length."""
    directory = tmp_path / "multi"
    rows = {"alpha": ["a0", "a1", "a2"], "beta": ["b0"], "gamma": ["c0", "c1"]}
    write_chat_dataset(
        directory,
        {name: [{"text": f"document {t}"} for t in texts] for name, texts in rows.items()},
        title="test",
        description="three splits",
    )
    return directory


def documents_of(path: Path) -> list[str]:
    """Decode a shard back into its documents (each ends with EOT)."""
    tokens = np.asarray(read_tokens(path)).tolist()
    pieces, current = [], []
    for token in tokens:
        if token == EOT_ID:
            pieces.append(gpt2_encoding().decode(current))
            current = []
        else:
            current.append(token)
    assert current == [], "every document ends with EOT"
    return pieces


def test_splits_are_read_round_robin_and_skip_documents_drops_the_interleaved_prefix(multi_split):
    config = PrepareConfig(hf_dataset=str(multi_split), hf_split=("alpha", "beta", "gamma"))
    assert [row["text"][9:] for row in round_robin_rows(config)] == ["a0", "b0", "c0", "a1", "c1", "a2"]
    skipping = PrepareConfig(hf_dataset=str(multi_split), hf_split=("alpha", "beta", "gamma"), skip_documents=2)
    assert [row["text"][9:] for row in round_robin_rows(skipping)] == ["c0", "a1", "c1", "a2"]


def test_per_document_split_follows_the_seeded_hash_rule(multi_split, tmp_path):
    config = PrepareConfig(
        hf_dataset=str(multi_split),
        hf_split=("alpha", "beta", "gamma"),
        validation_fraction=0.5,
        seed=3,
        skip_documents=1,
    )
    summary = prepare(config, tmp_path)
    order = ["b0", "c0", "a1", "c1", "a2"]  # after skipping a0; the index counts after the skip
    expected_val = [f"document {name}" for i, name in enumerate(order) if is_validation(3, i, 0.5)]
    expected_train = [f"document {name}" for i, name in enumerate(order) if not is_validation(3, i, 0.5)]
    assert documents_of(tmp_path / "val.bin") == expected_val
    assert documents_of(tmp_path / "train.bin") == expected_train
    assert summary["documents"] == {
        "read": 5,
        "skipped": 1,
        "train": len(expected_train),
        "validation": len(expected_val),
    }


def test_a_fixed_seed_gives_a_fixed_split():
    assert [is_validation(1337, index, 0.1) for index in range(12)] == [
        is_validation(1337, index, 0.1) for index in range(12)
    ]
    chosen = [index for index in range(2000) if is_validation(1337, index, 0.1)]
    assert 150 < len(chosen) < 250  # about 10%
    assert chosen[:5] == [index for index in range(2000) if is_validation(1337, index, 0.1)][:5]
    assert chosen != [index for index in range(2000) if is_validation(1338, index, 0.1)]
    # The rule itself: sha256("1337:0")[:8] as a big-endian integer over 2**64.
    import hashlib

    value = int.from_bytes(hashlib.sha256(b"1337:0").digest()[:8], "big") / 2**64
    assert is_validation(1337, 0, 0.1) == (value < 0.1)


def test_max_tokens_and_skip_tokens_count_across_documents(multi_split, tmp_path):
    every = prepare(
        PrepareConfig(
            hf_dataset=str(multi_split), hf_split=("alpha", "beta", "gamma"), validation_fraction=0.5, seed=3
        ),
        tmp_path / "all",
    )
    total = every["tokens"]["train"] + every["tokens"]["validation"]
    limited = prepare(
        PrepareConfig(
            hf_dataset=str(multi_split),
            hf_split=("alpha", "beta", "gamma"),
            validation_fraction=0.5,
            seed=3,
            skip_tokens=2,
            max_tokens=total - 4,
        ),
        tmp_path / "limited",
    )
    assert limited["tokens"]["train"] + limited["tokens"]["validation"] == total - 4
    assert limited["tokens"]["source_skipped"] == 2


def test_text_files_are_one_corpus_split_contiguously(tmp_path):
    first, second = tmp_path / "one.txt", tmp_path / "two.txt"
    first.write_text("To be, or not to be, that is the question.")
    second.write_text("Whether 'tis nobler in the mind to suffer.")
    summary = prepare(PrepareConfig(input=(str(first), str(second)), validation_fraction=0.25), tmp_path)
    train = np.asarray(read_tokens(tmp_path / "train.bin")).tolist()
    validation = np.asarray(read_tokens(tmp_path / "val.bin")).tolist()
    encoding = gpt2_encoding()
    whole = (
        encoding.encode_ordinary(first.read_text()) + [EOT_ID] + encoding.encode_ordinary(second.read_text()) + [EOT_ID]
    )
    assert train + validation == whole
    assert len(train) == int(len(whole) * 0.75)
    assert summary["objective"] == "next-token"


def test_local_jsonl_input_is_read_line_by_line(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"body": f"text number {i}"}) + "\n" for i in range(40)))
    summary = prepare(
        PrepareConfig(input=(str(path),), text_column="body", validation_fraction=0.2, seed=1), tmp_path / "out"
    )
    assert summary["documents"]["read"] == 40
    docs = documents_of(tmp_path / "out" / "train.bin") + documents_of(tmp_path / "out" / "val.bin")
    assert sorted(docs) == sorted(f"text number {i}" for i in range(40))


def dialogue(question: str, answer: str) -> dict:
    return {"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]}


@pytest.fixture
def chats(tmp_path: Path) -> Path:
    directory = tmp_path / "chats"
    write_chat_dataset(
        directory,
        {
            "first": [dialogue(f"What is {i} + {i}?", str(2 * i)) for i in range(30)],
            "second": [dialogue(f"Say the word w{i}.", f"w{i}") for i in range(30)],
        },
        title="chats",
        description="two splits",
    )
    return directory


def test_dialogues_give_masks_and_records_that_pass_every_check(chats, tmp_path):
    config = PrepareConfig(
        hf_dataset=str(chats),
        hf_split=("first", "second"),
        messages_column="messages",
        validation_fraction=0.2,
        record_context=8,
        seed=5,
    )
    summary = prepare(config, tmp_path)
    assert summary["objective"] == "assistant-masked-next-token"
    for prefix, side in (("train", "train"), ("val", "validation")):
        tokens = read_tokens(tmp_path / f"{prefix}.bin")
        mask = read_mask(tmp_path / f"{prefix}.mask", len(tokens))
        records = read_records(tmp_path / f"{prefix}.records", len(tokens), 8, mask)
        assert summary["shards"][side]["mask"]["active_tokens"] == int(mask.sum())
        assert summary["shards"][side]["records"]["records"] == len(records)
    # The first training dialogue is the first round-robin row sent to train; its mask is the hand-built one.
    first_train = next(i for i in range(60) if not is_validation(5, i, 0.2))
    row = (
        dialogue(f"What is {first_train // 2} + {first_train // 2}?", str(first_train))
        if first_train % 2 == 0
        else None
    )
    if row is not None:
        ids, mask = encode_dialogue(row["messages"], gpt2_encoding(), 0)
        assert np.asarray(read_tokens(tmp_path / "train.bin"))[: len(ids)].tolist() == ids.tolist()
        assert (
            np.asarray(read_mask(tmp_path / "train.mask", len(read_tokens(tmp_path / "train.bin"))))[
                : len(ids)
            ].tolist()
            == mask.tolist()
        )


def test_a_dialogue_cut_by_the_token_budget_is_reported_not_trained(chats, tmp_path, capsys):
    config = PrepareConfig(
        hf_dataset=str(chats), hf_split=("first", "second"), messages_column="messages", validation_fraction=0.2, seed=5
    )
    every = prepare(config, tmp_path / "all")
    total = every["tokens"]["train"] + every["tokens"]["validation"]
    budget = total - 5  # the last dialogue no longer fits
    summary = prepare(PrepareConfig(**{**config.__dict__, "max_tokens": budget}), tmp_path / "cut")
    left_out = summary["documents"]["left_out"]
    assert len(left_out) == 1 and left_out[0]["dialogue"] == 59
    assert "does not fit the remaining --max-tokens budget" in left_out[0]["reason"]
    assert "skipped dialogue 59" in capsys.readouterr().out
    tokens = read_tokens(tmp_path / "cut" / "train.bin")
    mask = read_mask(tmp_path / "cut" / "train.mask", len(tokens))
    read_records(tmp_path / "cut" / "train.records", len(tokens), 1024, mask)  # still consistent


def test_when_the_budget_leaves_a_shard_empty_the_command_fails_cleanly(chats, tmp_path, capsys):
    status = main(
        [
            "prepare",
            "--hf-dataset",
            str(chats),
            "--hf-split",
            "first",
            "--messages-column",
            "messages",
            "--max-tokens",
            "5",
            "--output",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert status == 1 and "shard empty" in err and err.count("error:") == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--validation-fraction", "1.0"], "--validation-fraction must be < 1, got 1.0"),
        (["--max-tokens", "-1"], "--max-tokens must be >= 0, got -1"),
        (["--record-context", "0"], "--record-context must be positive, got 0"),
        (["--messages-column", "messages", "--skip-tokens", "3"], "--skip-tokens would cut a conversation"),
        (["--hf-dataset", "x/y"], "pass either --input"),
    ],
)
def test_bad_flags_are_one_line(tmp_path, capsys, argv, message):
    source = tmp_path / "docs.jsonl"
    source.write_text('{"text": "hello"}\n')
    status = main(["prepare", "--input", str(source), *argv, "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert status == 1 and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_missing_and_unsupported_inputs_name_the_file(tmp_path, capsys):
    assert main(["prepare", "--input", str(tmp_path / "absent.jsonl"), "--output", str(tmp_path / "o")]) == 1
    assert "absent.jsonl: input file does not exist" in capsys.readouterr().err
    odd = tmp_path / "table.csv"
    odd.write_text("a,b\n")
    assert main(["prepare", "--input", str(odd), "--output", str(tmp_path / "o")]) == 1
    assert "table.csv: unsupported input" in capsys.readouterr().err


def parsed_config(config: dict, name: str) -> PrepareConfig:
    """The PrepareConfig the workflow's shell line gives for one config slice (its flags)."""
    config_slice = command_slice(config, name)
    parser = argparse.ArgumentParser()
    prepare_command.add_arguments(parser)
    config = from_args(PrepareConfig, parser.parse_args(shlex.split(flags(config_slice)) + ["--output", "unused"]))
    assert config == from_mapping(PrepareConfig, config_slice)  # the flags and the slice mean the same
    return config


def paper_profile() -> dict:
    """config.paper.yaml merged over config.yaml the way Snakemake merges them (key by key)."""
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in yaml.safe_load((REPO / "config.paper.yaml").read_text()).items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    return config


def test_paper_profile_resolves_to_the_reference_hub_calls(monkeypatch):
    config = paper_profile()
    fineweb = {
        "path": "HuggingFaceFW/fineweb-edu",
        "name": "sample-10BT",
        "split": "train",
        "streaming": True,
        "revision": "87f09149ef4734204d70ed1d046ddc9ca3f2b8f9",
    }
    assert hub_calls(parsed_config(config, "corpus_pretrain")) == [fineweb]
    continuation = parsed_config(config, "corpus_continuation")
    assert hub_calls(continuation) == [fineweb]
    # The skip is the count corpus_pretrain's manifest records (964,709 on the pinned revision),
    # passed by the rule as --skip-documents-from: no number in the profile.
    assert (continuation.skip_documents, continuation.max_tokens) == (0, 1530000000)
    assert config["corpus_continuation"]["skip_documents_from"] == "previous_corpus"
    assert parsed_config(config, "corpus_pretrain").max_tokens == 1020000000
    assert hub_calls(parsed_config(config, "corpus_sft_stage1")) == [
        {
            "path": "HuggingFaceTB/smol-smoltalk",
            "name": None,
            "split": "train",
            "streaming": True,
            "revision": "f73fe857d519ff6ac5af2ea67c4d3834da7b8bcc",
        }
    ]
    splits = [
        "smoltalk_smollm3_everyday_conversations_no_think",
        "Mixture_of_Thoughts_science_no_think",
        "smoltalk_smollm3_smol_summarize_no_think",
        "tulu_3_sft_personas_instruction_following_no_think",
        "OpenHermes_2.5_no_think",
    ]
    stage2 = parsed_config(config, "corpus_sft_stage2")
    assert hub_calls(stage2) == [
        {
            "path": "HuggingFaceTB/smoltalk2",
            "name": "SFT",
            "split": split,
            "streaming": True,
            "revision": "fc6cc2103c066455aade5d7fbb346039ae36ca5e",
        }
        for split in splits
    ]
    assert stage2.max_tokens == 50000000 and stage2.messages_column == "messages"

    # And those are exactly the calls the stream makes, in round-robin order.
    import datasets

    made = []

    def fake_load_dataset(**kwargs):
        made.append(kwargs)
        return iter([{"messages": [], "split": kwargs["split"]}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = list(round_robin_rows(stage2))
    assert made == hub_calls(stage2)
    assert [row["split"] for row in rows] == splits
