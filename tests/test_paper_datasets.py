"""The paper profile's data on real local layouts: directories saved by `datasets` (a Dataset, a
DatasetDict, per-configuration folders) and a hub-like directory, read with the profile's config
names; their manifests name the folder read and its content, not a hub revision; and the
continuation's skip derived from the first corpus's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from conftest import one_line_error

from gptlineage.cli import main
from gptlineage.lineage.artifact import ArtifactWriter, read_manifest

SFT_SPLITS = ("smoltalk_smollm3_everyday_conversations_no_think", "OpenHermes_2.5_no_think")
PINNED = "87f09149ef4734204d70ed1d046ddc9ca3f2b8f9"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets.disable_progress_bars()


def pages(prefix: str, count: int) -> datasets.Dataset:
    return datasets.Dataset.from_list([{"text": f"{prefix} page {index} of the web."} for index in range(count)])


def chats(prefix: str, count: int) -> datasets.Dataset:
    rows = [
        {"messages": [{"role": "user", "content": f"{prefix} {i}?"}, {"role": "assistant", "content": f"Yes, {i}."}]}
        for i in range(count)
    ]
    return datasets.Dataset.from_list(rows)


def saved_dataset(root: Path) -> Path:
    pages("fw", 30).save_to_disk(root / "fineweb")
    return root / "fineweb"


def saved_dict(root: Path) -> Path:
    datasets.DatasetDict({"train": pages("fw", 30)}).save_to_disk(root / "fineweb")
    return root / "fineweb"


def config_folder(root: Path) -> Path:
    datasets.DatasetDict({"train": pages("fw", 30)}).save_to_disk(root / "fineweb" / "sample-10BT")
    return root / "fineweb"


def hub_like(root: Path) -> Path:
    """A hub-like folder whose README declares the configuration sample-10BT."""
    (root / "fineweb" / "data").mkdir(parents=True)
    lines = [json.dumps({"text": f"fw page {index} of the web."}) for index in range(30)]
    (root / "fineweb" / "data" / "part.jsonl").write_text("\n".join(lines) + "\n")
    (root / "fineweb" / "README.md").write_text(
        "---\nconfigs:\n- config_name: sample-10BT\n  data_files:\n  - split: train\n    path: data/*.jsonl\n---\n"
    )
    return root / "fineweb"


def prepare(*argv: str) -> int:
    return main(["prepare", "--validation-fraction", "0.2", "--seed", "2", *argv])


@pytest.mark.parametrize(
    ("layout", "read", "kind"),
    [
        (saved_dataset, "", "save_to_disk Dataset"),
        (saved_dict, "", "save_to_disk DatasetDict"),
        (config_folder, "sample-10BT", "save_to_disk DatasetDict"),
        (hub_like, "", "hub-like"),
    ],
    ids=["dataset", "dataset-dict", "config-folder", "hub-like-readme"],
)
def test_every_local_layout_reads_with_the_profiles_config_name(tmp_path, layout, read, kind):
    root = layout(tmp_path)
    out = tmp_path / "corpus"
    assert (
        prepare("--hf-dataset", str(root), "--hf-config", "sample-10BT", "--hf-revision", PINNED, "--output", str(out))
        == 0
    )
    manifest = read_manifest(out)
    source = manifest["summary"]["source"]
    assert manifest["summary"]["documents"]["read"] == 30
    assert (source["kind"], source["layout"], source["config"]) == ("local-dataset", kind, "sample-10BT")
    # What was read is the folder and its content, not the profile's pinned hub revision.
    assert source["directory"] == str(root / read) if read else source["directory"] == str(root)
    assert source["revision"] is None and PINNED not in json.dumps(manifest["summary"])
    (entry,) = [entry for entry in manifest["inputs"] if entry["role"] == "dataset"]
    assert source["content"] == {"tree_sha256": entry["tree_sha256"]}
    assert Path(out, entry["path"]).resolve() == (root / read).resolve()


def test_a_saved_dataset_dict_of_the_sft_splits_is_read_round_robin(tmp_path):
    splits = {name: chats(name[:5], 4) for name in SFT_SPLITS}
    datasets.DatasetDict(splits).save_to_disk(tmp_path / "smoltalk2" / "SFT")
    out = tmp_path / "corpus"
    argv = ["--hf-dataset", str(tmp_path / "smoltalk2"), "--hf-config", "SFT", "--messages-column", "messages"]
    for split in SFT_SPLITS:
        argv += ["--hf-split", split]
    assert prepare(*argv, "--validation-fraction", "0.3", "--output", str(out)) == 0
    summary = read_manifest(out)["summary"]
    assert summary["documents"]["read"] == 8
    assert summary["source"]["splits"] == list(SFT_SPLITS)


def declares_other_config(root: Path) -> Path:
    hub_like(root)
    readme = root / "fineweb" / "README.md"
    readme.write_text(readme.read_text().replace("sample-10BT", "default"))
    return root / "fineweb"


def plain_files(root: Path) -> Path:
    hub_like(root)
    (root / "fineweb" / "README.md").unlink()
    return root / "fineweb"


def saved_as_other_config(root: Path) -> Path:
    saved_dataset(root)
    info = root / "fineweb" / "dataset_info.json"
    info.write_text(json.dumps({**json.loads(info.read_text()), "config_name": "sample-100BT"}))
    return root / "fineweb"


def two_configs(root: Path) -> Path:
    pages("a", 3).save_to_disk(root / "fineweb" / "sample-100BT")
    pages("b", 3).save_to_disk(root / "fineweb" / "sample-350BT")
    return root / "fineweb"


@pytest.mark.parametrize(
    ("layout", "extra", "message"),
    [
        pytest.param(
            plain_files,
            [],
            "--hf-dataset {root}: no configuration 'sample-10BT' (available: ['default']); set hf_config to one"
            " of those, declare 'sample-10BT' in its README.md configs, or put its files in {root}/sample-10BT",
            id="hub-like-without-the-config",
        ),
        pytest.param(
            declares_other_config,
            [],
            "--hf-dataset {root}: no configuration 'sample-10BT' (available: ['default']); set hf_config to one"
            " of those, declare 'sample-10BT' in its README.md configs, or put its files in {root}/sample-10BT",
            id="readme-declares-another-config",
        ),
        pytest.param(
            two_configs,
            [],
            "--hf-dataset {root}: no configuration 'sample-10BT' (configuration folders: sample-100BT,"
            " sample-350BT); set hf_config to one of them",
            id="config-folders-without-this-one",
        ),
        pytest.param(
            saved_as_other_config,
            [],
            "--hf-dataset {root}: saved with configuration 'sample-100BT', not 'sample-10BT'; set hf_config:"
            " sample-100BT or move it to {root}/sample-10BT",
            id="saved-from-another-config",
        ),
        pytest.param(
            saved_dict,
            ["--hf-split", "validation"],
            "--hf-dataset {root}: no split 'validation' (saved splits: train)",
            id="dataset-dict-without-the-split",
        ),
        pytest.param(
            saved_dataset,
            ["--hf-split", "train", "--hf-split", "test"],
            "--hf-dataset {root}: one saved Dataset (split unnamed), asked for train, test; ask for one split,"
            " or save a DatasetDict with these splits",
            id="one-dataset-several-splits",
        ),
    ],
)
def test_a_layout_without_what_is_asked_is_one_line_naming_what_it_has(tmp_path, capsys, layout, extra, message):
    root = layout(tmp_path)
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    assert (
        prepare("--hf-dataset", str(root), "--hf-config", "sample-10BT", *extra, "--output", str(tmp_path / "out")) == 1
    )
    err = capsys.readouterr().err
    assert err == f"error: prepare: {message.format(root=root)}\n"
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before  # nothing written


def test_the_continuation_skips_exactly_the_documents_the_first_corpus_consumed(tmp_path):
    root = saved_dict(tmp_path)
    source = ["--hf-dataset", str(root), "--hf-config", "sample-10BT"]
    first, second = tmp_path / "pretrain", tmp_path / "continuation"
    assert prepare(*source, "--max-tokens", "120", "--output", str(first)) == 0
    assert prepare(*source, "--skip-documents-from", str(first), "--output", str(second)) == 0
    consumed = read_manifest(first)["summary"]["documents"]
    continued = read_manifest(second)
    assert 0 < consumed["read"] < 30 and consumed["skipped"] == 0
    assert continued["summary"]["documents"]["skipped"] == consumed["read"]
    assert continued["summary"]["documents"]["read"] == 30 - consumed["read"]
    assert continued["summary"]["documents_skipped_after"] == str(first)
    (entry,) = [entry for entry in continued["inputs"] if entry["role"] == "skip_after"]
    assert entry["artifact_id"] == read_manifest(first)["id"]  # recorded by artifact id
    # A third corpus after the second starts after both (the skipped rows count too).
    third = tmp_path / "third"
    assert prepare(*source, "--skip-documents-from", str(second), "--output", str(third)) == 1


def another_stream(tmp_path: Path) -> list[str]:
    datasets.DatasetDict({"train": pages("other", 30)}).save_to_disk(tmp_path / "other")
    first = tmp_path / "pretrain"
    assert prepare("--hf-dataset", str(tmp_path / "other"), "--max-documents", "10", "--output", str(first)) == 0
    return ["--skip-documents-from", str(first)]


def not_a_corpus(tmp_path: Path) -> list[str]:
    with ArtifactWriter(tmp_path / "pretrain", command="train", parameters={}, inputs={}) as artifact:
        artifact.summary = {"documents": {"read": 3, "skipped": 0}}
    return ["--skip-documents-from", str(tmp_path / "pretrain")]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        pytest.param(
            another_stream,
            "--skip-documents-from {tmp}/pretrain: that corpus read another stream ({{'dataset': '{tmp}/other',"
            " 'config': None, 'splits': ['train']}}), this one reads {tmp}/fineweb/sample-10BT[train];"
            " its document count would not say where this one starts",
            id="skip-after-another-stream",
        ),
        pytest.param(
            not_a_corpus,
            "--skip-documents-from {tmp}/pretrain: a 'train' artifact, not a corpus (prepare)",
            id="skip-after-a-training-run",
        ),
        pytest.param(
            lambda tmp: ["--skip-documents-from", str(tmp / "nothing")],
            "--skip-documents-from {tmp}/nothing: no such corpus artifact directory",
            id="skip-after-a-missing-directory",
        ),
        pytest.param(
            lambda tmp: ["--skip-documents-from", str(tmp), "--skip-documents", "3"],
            "--skip-documents-from and --skip-documents exclude each other: pass one of them",
            id="skip-count-and-skip-from",
        ),
    ],
)
def test_a_skip_from_the_wrong_artifact_is_one_line(tmp_path, capsys, make, message):
    root = saved_dict(tmp_path)
    extra = make(tmp_path)
    capsys.readouterr()
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    source = ["--hf-dataset", str(root), "--hf-config", "sample-10BT", "--output", str(tmp_path / "out")]
    assert prepare(*source, *extra) != 0
    assert capsys.readouterr().err == f"error: prepare: {message.format(tmp=tmp_path)}\n"
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("config", [None, "sub"])
def test_a_local_dataset_with_a_loading_script_is_one_line(tmp_path, capsys, monkeypatch, config):
    """DIR/DIR.py (or DIR/<config>/<config>.py) made `datasets` raise a RuntimeError traceback."""
    monkeypatch.chdir(tmp_path)
    folder = Path("ds", config) if config else Path("ds")
    folder.mkdir(parents=True)
    (folder / "data.jsonl").write_text('{"text": "hello world"}\n', encoding="utf-8")
    (folder / f"{folder.name}.py").write_text('open("PWNED", "w")\n', encoding="utf-8")
    argv = ["prepare", "--hf-dataset", "ds", "--max-documents", "5", "--output", "out"]
    err = one_line_error(argv + (["--hf-config", config] if config else []), capsys)
    assert err.startswith(f"error: prepare: --hf-dataset {folder}: {folder / folder.name}.py is a dataset loading")
    assert not Path("PWNED").exists() and not Path("out").exists()
