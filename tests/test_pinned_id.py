"""The artifact id of a fixed manifest, pinned to a literal: a change to canonical JSON, to what the id
covers or to the environment class would silently re-key every artifact (and break every printed
`--expect-id`), so it must show here first, and be made once, on purpose, with a new schema name.

The neighbours pin what must not change the id (argv and so flag order, input and output locations,
an artifact member's bytes, threads, platform, the GPU, host, times, git state, summary, files, the seal)
and that every identity field does change it. docs/manifest.md states the rule.
"""

import copy

import pytest

from gptlineage.lineage.artifact import artifact_id, identity_payload
from gptlineage.lineage.hashing import canonical_json, sha256_json

FIXED = {
    "schema": "gptlineage.artifact.v4",
    "command": {
        "name": "train",
        "argv": ["gptlineage", "train", "--steps", "5", "--output", "results/a"],
        "declaration": {"side_outputs": {"--metrics": "drop"}, "timing_keys": ["duration_ms"]},
    },
    "parameters": {"steps": 5, "lr": 0.0002, "preset": "cpu-small", "tie": True, "note": "é", "skip": None},
    "inputs": [
        {"role": "data", "path": "results/corpus", "artifact_id": "a" * 64, "content_sha256": "b" * 64, "member": "."},
        {
            "role": "metrics",
            "path": "../run/metrics.json",
            "artifact_id": "9" * 64,
            "member": "metrics.json",
            "sha256": "8" * 64,
        },
        {"role": "config", "path": "data/x.json", "sha256": "c" * 64},
    ],
    "files": [{"path": "params.safetensors", "bytes": 10, "sha256": "d" * 64}],
    "summary": {"val_loss": 1.25},
    "code": {"module": "gptlineage.commands.train", "closure_sha256": "e" * 64, "files": []},
    "environment": {
        "python": "3.11.9",
        "torch": "2.13.0",
        "numpy": "2.1.3",
        "platform": "Linux-x86_64",
        "device": "cpu",
        "threads": 2,
        "cpus": 2,
        "gpu": None,
        "libraries": {"numpy": "2.1.3", "tiktoken": "0.9.0", "matplotlib": "3.9.2"},
    },
    "run": {"started_utc": "2026-12-01T00:00:00Z", "finished_utc": "2026-12-01T00:01:00Z", "host": "h"},
}
PINNED_ID = "4ec5e7817358408d14152727b9fb89b23538fb54e2ac2d231875b9f83adab675"


def test_canonical_json_is_pinned():
    assert canonical_json({"b": [1.5, "é", None, True], "a": 2}) == '{"a":2,"b":[1.5,"é",null,true]}'
    assert sha256_json({"a": 1}) == "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"


def test_the_id_of_a_fixed_manifest_is_pinned():
    assert artifact_id(FIXED) == PINNED_ID


def with_change(path: tuple, value) -> dict:
    manifest = copy.deepcopy(FIXED)
    holder = manifest
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    return manifest


@pytest.mark.parametrize(
    "path, value",
    [
        (("command", "argv"), ["gptlineage", "train", "--output", "elsewhere", "--steps", "5"]),
        (("command", "argv"), ["gptlineage", "train", "--output", "results/a", "--steps", "5"]),  # flag order
        (("command", "argv"), ["gptlineage", "train", "--steps=5", "--output=/elsewhere/a"]),  # output location
        (("inputs", 1, "sha256"), "7" * 64),  # an artifact member's bytes: its timings, say
        (("environment", "libraries", "matplotlib"), "3.10.0"),  # draws, computes no number
        (("inputs", 0, "artifact_path"), "../../moved/corpus"),
        (("inputs", 0, "path"), "/somewhere/else"),
        (("inputs", 0, "content_sha256"), "f" * 64),
        (("environment", "threads"), 64),
        (("environment", "cpus"), 64),
        (("environment", "platform"), "Darwin-arm64"),
        (("environment", "gpu"), {"name": "H200"}),
        (("environment", "cuda_visible_devices"), "3"),  # a field a newer writer adds outside the class
        (("run", "host"), "other"),
        (("run", "started_utc"), "2030-01-01T00:00:00Z"),
        (("run", "finished_utc"), "2030-01-01T00:09:00Z"),
        (("run", "git_commit"), "0" * 40),
        (("run", "git_dirty"), True),
        (("manifest_sha256",), "f" * 64),
        (("summary",), {"val_loss": 9.0}),
        (("files",), []),
        (("code", "files"), [{"path": "x.py", "sha256": "0" * 64}]),
    ],
    ids=lambda value: "/".join(map(str, value)) if isinstance(value, tuple) else None,
)
def test_what_is_recorded_but_not_the_work_leaves_the_id(path, value):
    assert artifact_id(with_change(path, value)) == PINNED_ID


def test_input_order_leaves_the_id():
    manifest = copy.deepcopy(FIXED)
    manifest["inputs"].reverse()
    assert artifact_id(manifest) == PINNED_ID


@pytest.mark.parametrize(
    "path, value",
    [
        (("schema",), "gptlineage.artifact.v5"),
        (("command", "name"), "generate"),
        (("parameters", "steps"), 6),
        (("parameters", "skip"), 0),
        (("inputs", 0, "artifact_id"), "0" * 64),
        (("inputs", 0, "role"), "other"),
        (("inputs", 2, "sha256"), "0" * 64),
        (("inputs", 1, "member"), "trace-summary.json"),
        (("command", "declaration"), {"side_outputs": {}, "timing_keys": ["*"]}),
        (("environment", "libraries", "tiktoken"), "0.10.0"),
        (("environment", "behaviour"), {"tiktoken": "0" * 64}),  # a patched tokenizer, its version kept (E14)
        (("code", "closure_sha256"), "0" * 64),
        (("environment", "python"), "3.12.0"),
        (("environment", "torch"), "2.12.0"),
        (("environment", "numpy"), "1.26.4"),
        (("environment", "device"), "cuda:0"),
    ],
    ids=lambda value: "/".join(map(str, value)) if isinstance(value, tuple) else None,
)
def test_every_identity_field_changes_the_id(path, value):
    assert artifact_id(with_change(path, value)) != PINNED_ID


def test_the_device_number_leaves_the_id_but_its_kind_does_not():
    on_card_0, on_card_3 = (
        with_change(("environment", "device"), "cuda:0"),
        with_change(("environment", "device"), "cuda:3"),
    )
    assert artifact_id(on_card_0) == artifact_id(on_card_3)
    assert identity_payload(on_card_0)["environment"]["device"] == "cuda"
