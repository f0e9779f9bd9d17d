"""Synthetic chat data: determinism, exact answers, the held-out suite, offline loading, the command."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gptlineage.cli import main
from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.chat_families import (
    CAPITALS,
    FAMILIES,
    TASK_FAMILIES,
    WORD_FAMILIES,
    addition_held_out,
    make_dialogue,
)
from gptlineage.corpus.chat_tables import HELD_OUT_SUBJECTS, WORDS
from gptlineage.corpus.synth_chat import (
    STAGE2_SPLITS,
    SUITE_SCHEMA,
    SynthChatConfig,
    check_held_out,
    prompt_suite,
    read_prompt_suite,
    stage1_dataset,
    stage2_dataset,
    write_chat_dataset,
    write_synth_chat,
)

SIZES = {"stage1_dialogues": 400, "stage2_dialogues_per_split": 120, "suite_prompts": 40}

# --- independent recomputation of every family's answer, from the prompt text alone ---------

POSITIVE = {"loved", "wonderful", "fantastic", "enjoyed", "happy"}
NEGATIVE = {"hated", "terrible", "boring", "regret", "waste"}
KNOWN_CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Canada": "Ottawa",
    "Australia": "Canberra",
    "Peru": "Lima",
    "Kenya": "Nairobi",
    "Switzerland": "Bern",
    "Turkey": "Ankara",
}


def the_one(found: list[str], prompt: str) -> str:
    assert len(set(found)) == 1, (found, prompt)
    return found[0]


def expected_answer(family: str, prompt: str) -> str:
    if family == "addition":
        match = re.search(r"(\d+) (?:\+|and|plus|to) (\d+)", prompt)
        assert match, prompt
        return str(int(match[1]) + int(match[2]))
    if family == "capital":
        country = the_one([c for c in CAPITALS if re.search(rf"\b{re.escape(c)}\b", prompt)], prompt)
        return CAPITALS[country]
    if family == "sentiment":
        words = set(re.findall(r"[a-z]+", prompt.lower()))
        assert bool(words & POSITIVE) != bool(words & NEGATIVE), prompt
        return "positive" if words & POSITIVE else "negative"
    # The task's word is the one lowercase word of the prompt in the word list.
    word = the_one([w for w in re.findall(r"[a-z]+", prompt) if w in WORDS], prompt)
    return {
        "echo_word": word,
        "repeat_word": f"{word} {word}",
        "uppercase": word.upper(),
        "count_letters": str(len(word)),
    }[family]


def template_pattern(template: str) -> re.Pattern:
    """A regex that matches exactly the prompts a template gives (any field value)."""
    parts = re.split(r"\{[a-z]\}", template)
    return re.compile("(.+)".join(re.escape(part) for part in parts))


def templates_matching(templates: tuple[str, ...], prompt: str) -> list[str]:
    return [template for template in templates if template_pattern(template).fullmatch(prompt)]


def check_dialogue(row: dict) -> None:
    assert list(row) == ["messages", "family", "answer", "turn_families"]
    messages = row["messages"]
    roles = [m["role"] for m in messages]
    if roles[0] == "system":
        roles = roles[1:]
    assert roles in (["user", "assistant"], ["user", "assistant"] * 2), roles
    assert all(m["role"] != "system" for m in messages[1:])
    pairs = [
        (messages[i]["content"], messages[i + 1]["content"])
        for i in range(len(messages) - 1)
        if messages[i]["role"] == "user"
    ]
    families = row["turn_families"]
    assert families[0] == row["family"] and len(families) == len(pairs)
    for (prompt, answer), family in zip(pairs, families, strict=True):
        assert answer == expected_answer(family, prompt), (prompt, answer)
    if len(set(families)) == 2:  # a contrast dialogue: two word families asked about one word
        assert set(families) <= set(WORD_FAMILIES), families
        words = [the_one([w for w in re.findall(r"[a-z]+", p) if w in WORDS], p) for p, _ in pairs]
        assert words[0] == words[1], pairs
    assert row["answer"] == messages[-1]["content"]


def user_prompts(*datasets) -> list[str]:
    return [
        m["content"]
        for splits in datasets
        for rows in splits.values()
        for row in rows
        for m in row["messages"]
        if m["role"] == "user"
    ]


def all_bytes(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


# --- tests -------------------------------------------------------------------------------------


def test_capital_table_spot_checks():
    assert 40 <= len(CAPITALS) <= 60
    for country, capital in KNOWN_CAPITALS.items():
        assert CAPITALS[country] == capital
    assert all(" " not in capital for capital in CAPITALS.values())  # "answer in one word"


def test_same_seed_same_bytes_other_seed_differs(tmp_path):
    state = random.getstate()
    write_synth_chat(tmp_path / "a", SynthChatConfig(seed=1337, **SIZES))
    write_synth_chat(tmp_path / "b", SynthChatConfig(seed=1337, **SIZES))
    write_synth_chat(tmp_path / "c", SynthChatConfig(seed=7, **SIZES))
    assert random.getstate() == state  # the global RNG is never touched
    a, b, c = (all_bytes(tmp_path / name) for name in "abc")
    assert list(a) == [
        "prompt-suite.json",
        "stage1/README.md",
        "stage1/data/train.jsonl",
        "stage2/README.md",
        *(f"stage2/data/{split}.jsonl" for split in sorted(STAGE2_SPLITS)),
    ]
    assert a == b
    for name in a:
        if name.endswith((".jsonl", ".json")):
            assert a[name] != c[name], name
    for content in a.values():
        assert b"\r" not in content and content.endswith(b"\n")
    line = a["stage1/data/train.jsonl"].split(b"\n")[0].decode()
    assert line == json.dumps(json.loads(line), ensure_ascii=False)


def test_every_answer_is_correct_by_recomputation():
    stage1 = stage1_dataset(2000, seed=3)
    stage2 = stage2_dataset(400, seed=3)
    rows = stage1["train"]
    assert len(rows) == 2000 and list(stage1) == ["train"]
    assert {row["family"] for row in rows} == set(FAMILIES)
    assert any(row["messages"][0]["role"] == "system" for row in rows)
    assert any(len(row["messages"]) >= 4 for row in rows)  # a few multi-turn dialogues
    assert sum(len(row["messages"]) >= 4 for row in rows) < len(rows) // 4
    for row in rows:
        check_dialogue(row)
    assert list(stage2) == list(STAGE2_SPLITS) and len(stage2) >= 3
    for split, split_rows in stage2.items():
        assert len(split_rows) == 400
        assert {row["family"] for row in split_rows} == set(STAGE2_SPLITS[split])
        for row in split_rows:
            check_dialogue(row)
    suite = prompt_suite(3, 40)
    for case in suite:
        assert list(case) == ["prompt", "expected", "family"]
        assert case["expected"] == expected_answer(case["family"], case["prompt"])


def test_templates_vary_within_each_family():
    rng = random.Random(5)
    for family in FAMILIES:
        templates = TASK_FAMILIES[family].templates
        used = set()
        for _ in range(300):
            messages = make_dialogue(family, rng)["messages"]
            first_user = next(m["content"] for m in messages if m["role"] == "user")
            used.update(templates_matching(templates, first_user))
        assert used == set(templates) and len(templates) >= 6, (family, set(templates) - used)


def training_turns(*datasets) -> list[tuple[str, str, str]]:
    """(family, prompt without its follow-up prefix, answer) of every user turn of the datasets."""
    turns = []
    for splits in datasets:
        for rows in splits.values():
            for row in rows:
                messages = [m for m in row["messages"] if m["role"] != "system"]
                pairs = zip(messages[0::2], messages[1::2], row["turn_families"], strict=True)
                for prompt, answer, family in pairs:
                    content = prompt["content"].removeprefix("Another one. ").removeprefix("Next: ")
                    turns.append((family, content, answer["content"]))
    return turns


def test_the_suite_holds_out_phrasings_and_asks_only_trained_facts():
    training = [stage1_dataset(3000, 1337), stage2_dataset(1500, 1337)]
    turns = training_turns(*training)
    trained_answers = {(family, answer) for family, _, answer in turns}
    for family, prompt, _ in turns:  # training uses training phrasings only, and no held-out item
        templates = TASK_FAMILIES[family]
        assert templates_matching(templates.templates, prompt), prompt
        assert not templates_matching(templates.suite_templates, prompt), prompt
        if family == "addition":
            a, b = map(int, re.findall(r"\d+", prompt))
            assert not addition_held_out(a, b), prompt
        if family == "sentiment":
            assert not set(re.findall(r"[a-z]+", prompt)) & set(HELD_OUT_SUBJECTS), prompt
    for name, family in TASK_FAMILIES.items():
        assert not set(family.templates) & set(family.suite_templates), name
        assert len(family.suite_templates) >= 3, name
    for seed in (1337, 7):
        for case in prompt_suite(seed, 70):
            family = TASK_FAMILIES[case["family"]]
            assert templates_matching(family.suite_templates, case["prompt"]), case
            # every fact the suite asks is trained: the same answer in the same family (a sum is
            # computed, not recalled, and its operand pair is held out)
            if case["family"] != "addition":
                assert (case["family"], case["expected"]) in trained_answers, case


def test_suite_prompts_never_occur_in_training():
    suite = prompt_suite(1337, 40)
    prompts = [case["prompt"] for case in suite]
    assert len(prompts) == 40 and len(set(prompts)) == 40
    counts = {family: sum(case["family"] == family for case in suite) for family in FAMILIES}
    assert max(counts.values()) - min(counts.values()) <= 1
    # Held-out items are fixed, so training from any seed never meets the suite from any seed.
    training = [stage1_dataset(3000, seed) for seed in (1337, 0)] + [stage2_dataset(1500, 1337)]
    joined = "\n".join(user_prompts(*training))
    for other_seed in (1337, 0, 99):
        for case in prompt_suite(other_seed, 40):
            assert case["prompt"] not in joined, case["prompt"]
    check_held_out(suite, *training)
    leaked = {
        "train": [
            {"messages": [{"role": "user", "content": "Hi. " + prompts[3]}, {"role": "assistant", "content": "x"}]}
        ]
    }
    with pytest.raises(GptlineageError, match="held-out prompt occurs"):
        check_held_out(suite, *training, leaked)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=-(2**40), max_value=2**40), n=st.integers(min_value=1, max_value=70))
def test_suite_is_held_out_and_correct_for_any_seed(seed, n):
    suite = prompt_suite(seed, n)
    assert len(suite) == n == len({case["prompt"] for case in suite})
    training = stage1_dataset(150, seed)
    check_held_out(suite, training)
    for case in suite:
        assert case["expected"] == expected_answer(case["family"], case["prompt"])
    assert prompt_suite(seed, n) == suite


def test_too_many_suite_prompts_and_bad_counts_are_clean_errors():
    with pytest.raises(GptlineageError, match="held-out ones exist"):
        prompt_suite(1, 5000)
    for bad in (0, -1):
        with pytest.raises(GptlineageError, match="positive integer"):
            stage1_dataset(bad, 1)
        with pytest.raises(GptlineageError, match="positive integer"):
            stage2_dataset(bad, 1)
    with pytest.raises(GptlineageError, match="unknown task family"):
        make_dialogue("poetry", random.Random(0))


LOADER = textwrap.dedent("""
    import json, sys
    import datasets
    stage1, stage2, custom = sys.argv[1:4]
    out = {"offline": datasets.config.HF_HUB_OFFLINE}
    for name, directory in (("stage1", stage1), ("stage2", stage2), ("custom", custom)):
        names = datasets.get_dataset_split_names(directory)
        out[name] = {"order": names, "dict_order": list(datasets.load_dataset(directory, streaming=True)),
                     "rows": {split: list(datasets.load_dataset(directory, split=split, streaming=True))
                              for split in names}}
    print(json.dumps(out))
""")


def test_named_splits_load_offline_in_declared_order(tmp_path):
    write_synth_chat(
        tmp_path / "chat", SynthChatConfig(seed=11, stage1_dialogues=30, stage2_dialogues_per_split=20, suite_prompts=7)
    )
    order = ["zeta", "alpha", "mid_split"]  # not alphabetical: the README keeps the order given
    rng = random.Random(0)
    written = {name: [make_dialogue(FAMILIES[i], rng) for i in range(3)] for name in order}
    write_chat_dataset(tmp_path / "custom", written, title="custom", description="order check")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            LOADER,
            str(tmp_path / "chat" / "stage1"),
            str(tmp_path / "chat" / "stage2"),
            str(tmp_path / "custom"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded["offline"] is True
    assert loaded["stage1"]["order"] == ["train"]
    assert loaded["stage2"]["order"] == loaded["stage2"]["dict_order"] == list(STAGE2_SPLITS)
    assert len(loaded["stage2"]["order"]) >= 3
    assert loaded["custom"]["order"] == loaded["custom"]["dict_order"] == order
    assert loaded["custom"]["rows"] == written
    for stage in ("stage1", "stage2"):
        for split, rows in loaded[stage]["rows"].items():
            lines = (tmp_path / "chat" / stage / "data" / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
            assert rows == [json.loads(line) for line in lines]
    assert not list((tmp_path / "chat").rglob("*.lock"))  # loading leaves the artifact untouched


def test_command_writes_one_artifact_with_a_manifest(tmp_path, capsys):
    output = tmp_path / "synth_chat"
    argv = [
        "synth-chat",
        "--stage1-dialogues",
        "50",
        "--stage2-dialogues-per-split",
        "10",
        "--suite-prompts",
        "14",
        "--seed",
        "5",
        "--output",
        str(output),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    assert out[0].startswith(f"wrote {output / 'stage1'} dialogues=50 train=50 chars=")
    assert out[1].startswith(f"wrote {output / 'stage2'} dialogues=40 ")
    assert "knowledge_no_think=10" in out[1] and "tokens~" in out[1]
    assert out[2] == f"wrote {output / 'prompt-suite.json'} cases=14 families=7"
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["command"]["name"] == "synth-chat"
    assert manifest["parameters"] == {
        "stage1_dialogues": 50,
        "stage2_dialogues_per_split": 10,
        "suite_prompts": 14,
        "seed": 5,
    }
    files = [entry["path"] for entry in manifest["files"]]
    assert "stage1/data/train.jsonl" in files and "stage2/README.md" in files and "prompt-suite.json" in files
    suite = read_prompt_suite(output / "prompt-suite.json")
    assert suite["schema"] == SUITE_SCHEMA and suite["settings"]["seed"] == 5 and len(suite["cases"]) == 14
    assert main(["lineage", "verify", str(output)]) == 0
    capsys.readouterr()
    assert not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize("flag,value", [("--suite-prompts", "many"), ("--seed", "x")])
def test_command_refuses_unreadable_flags_with_one_line(tmp_path, capsys, flag, value):
    output = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main(["synth-chat", flag, value, "--output", str(output)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: synth-chat:") and flag in err
    assert not output.exists()


@pytest.mark.parametrize(
    "flag,value", [("--stage1-dialogues", "-5"), ("--stage2-dialogues-per-split", "-1"), ("--suite-prompts", "0")]
)
def test_command_refuses_out_of_range_flags_with_one_line(tmp_path, capsys, flag, value):
    output = tmp_path / "out"
    assert main(["synth-chat", flag, value, "--output", str(output)]) == 1
    err = capsys.readouterr().err
    assert err == f"error: synth-chat: {flag} must be positive, got {value}\n"
    assert not output.exists()


def test_command_too_large_suite_is_one_error_line_and_no_artifact(tmp_path, capsys):
    output = tmp_path / "out"
    status = main(
        [
            "synth-chat",
            "--stage1-dialogues",
            "5",
            "--stage2-dialogues-per-split",
            "5",
            "--suite-prompts",
            "5000",
            "--output",
            str(output),
        ]
    )
    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1 and err.startswith("error: synth-chat: suite prompts:")
    assert not output.exists() and not list(tmp_path.iterdir())


def test_read_prompt_suite_rejects_a_wrong_schema(tmp_path):
    path = tmp_path / "prompt-suite.json"
    path.write_text(json.dumps({"schema": "other", "cases": []}))
    with pytest.raises(GptlineageError, match="schema is not"):
        read_prompt_suite(path)
    with pytest.raises(GptlineageError, match="no such file"):
        read_prompt_suite(tmp_path / "missing.json")
