"""Deterministic synthetic chat data whose every answer can be checked exactly.

The offline profile stands in for smol-smoltalk (stage 1) and smoltalk2 (stage 2) with small
dialogues in the same `messages` format. Each dialogue comes from one task family, and each
family's answer is a pure function of its prompt:

    addition       "What is 17 + 25? Answer with only the number."               -> "42"
    echo_word      "Return exactly the word river and nothing else."             -> "river"
    capital        "What is the capital of France? Answer in one word."          -> "Paris"
    sentiment      "Classify the sentiment ...: I loved the film."               -> "positive"
    repeat_word    "Repeat this word twice: cat"                                 -> "cat cat"
    uppercase      "Write the word cat in capital letters."                      -> "CAT"
    count_letters  "How many letters are in the word apple? Answer with only the number." -> "5"

Example:
    >>> import random
    >>> row = make_dialogue("addition", random.Random(0))
    >>> sorted(row), row["messages"][-1]["role"]
    (['answer', 'family', 'messages'], 'assistant')
    >>> stage2 = stage2_dataset(3, seed=1)
    >>> list(stage2)
    ['arithmetic_no_think', 'instruction_following_no_think', 'knowledge_no_think', 'sentiment_no_think']

Held-out guarantee: a fixed set of operand pairs, words, countries and review subjects is
reserved for `prompt_suite` and never drawn by training dialogues, so no suite prompt occurs
verbatim in any training set (whatever the seeds); `check_held_out` verifies it and
`write_synth_chat` calls it before anything is written.

Local datasets are directories that `datasets.load_dataset(DIR, split=NAME, streaming=True)`
reads offline: `DIR/data/NAME.jsonl` (one JSON object a line, "\\n" line ends) and a
`DIR/README.md` whose YAML front matter lists the splits in the order given. Everything
is byte-for-byte deterministic for a seed; each stream draws from its own `random.Random`
seeded with a string such as "1337:stage1", never from the global RNG.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.jsonio import read_json
from gptlineage.errors import GptlineageError

SUITE_SCHEMA = "gptlineage.prompt-suite.v1"
SUITE_FILE = "prompt-suite.json"
STAGE1_DIR = "stage1"
STAGE2_DIR = "stage2"

# ---------------------------------------------------------------------------------------------
# Fixed tables. Entries listed under HELD_OUT_* are for the prompt suite only.

CAPITALS: dict[str, str] = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo",
    "Greece": "Athens", "Ireland": "Dublin", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Denmark": "Copenhagen", "Poland": "Warsaw", "Austria": "Vienna", "Belgium": "Brussels",
    "the Netherlands": "Amsterdam", "Switzerland": "Bern", "Canada": "Ottawa",
    "Australia": "Canberra", "Cuba": "Havana", "Thailand": "Bangkok", "Indonesia": "Jakarta",
    "the Philippines": "Manila", "Iran": "Tehran", "Iraq": "Baghdad", "Turkey": "Ankara",
    "Czechia": "Prague", "Romania": "Bucharest", "Bulgaria": "Sofia", "Serbia": "Belgrade",
    "Croatia": "Zagreb", "Ghana": "Accra", "Senegal": "Dakar", "South Korea": "Seoul",
    "Iceland": "Reykjavik", "Latvia": "Riga", "Estonia": "Tallinn", "Venezuela": "Caracas",
    "Nepal": "Kathmandu", "Qatar": "Doha", "Lebanon": "Beirut",
    # held out (see HELD_OUT_COUNTRIES)
    "Portugal": "Lisbon", "Kenya": "Nairobi", "Norway": "Oslo", "Peru": "Lima",
    "Vietnam": "Hanoi", "Hungary": "Budapest", "Morocco": "Rabat", "Jordan": "Amman",
}
HELD_OUT_COUNTRIES: tuple[str, ...] = (
    "Portugal", "Kenya", "Norway", "Peru", "Vietnam", "Hungary", "Morocco", "Jordan",
)
TRAIN_COUNTRIES: tuple[str, ...] = tuple(c for c in CAPITALS if c not in HELD_OUT_COUNTRIES)

TRAIN_WORDS: tuple[str, ...] = (
    "apple", "river", "cat", "dog", "house", "garden", "window", "pencil", "tiger", "cloud",
    "bread", "chair", "table", "forest", "mountain", "ocean", "rabbit", "yellow", "purple",
    "silver", "rocket", "planet", "candle", "button", "turtle", "banana", "orange", "lemon",
    "bottle", "ladder", "mirror", "basket", "jacket", "pillow", "carpet", "dragon", "castle",
    "bridge", "island", "winter", "summer", "spring", "thunder", "sunset", "market", "engine",
    "guitar", "piano", "camera", "hammer", "wallet", "kettle", "spoon", "horse", "monkey",
    "zebra", "puzzle", "anchor", "feather", "marble",
)
HELD_OUT_WORDS: tuple[str, ...] = (
    "lantern", "pebble", "violin", "harbor", "meadow", "falcon", "velvet", "canyon",
    "walnut", "compass", "orchid", "glacier",
)

# Review subjects: (noun, noun phrase with its article).
TRAIN_SUBJECTS: tuple[str, ...] = (
    "film", "book", "meal", "hotel", "concert", "game", "show", "trip", "song", "class",
    "restaurant", "play", "album", "lecture", "party", "movie",
)
HELD_OUT_SUBJECTS: tuple[str, ...] = ("museum", "podcast", "festival", "bakery")

POSITIVE_SENTENCES: tuple[str, ...] = (
    "I loved the {n}.", "The {n} was wonderful.", "What a fantastic {n}!",
    "I really enjoyed the {n}.", "The {n} made me so happy.",
)
NEGATIVE_SENTENCES: tuple[str, ...] = (
    "I hated the {n}.", "The {n} was terrible.", "What a boring {n}!",
    "I regret paying for the {n}.", "The {n} was a complete waste of time.",
)

ADDITION_MAX = 99  # operands are 0..ADDITION_MAX


def addition_held_out(a: int, b: int) -> bool:
    """The operand pairs (about 1 in 13) reserved for the prompt suite."""
    return (7 * a + 3 * b) % 13 == 5


SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are a helpful assistant.",
    "You are a concise assistant. Answer as briefly as possible.",
    "Answer the user's request exactly, with no extra words.",
)
SYSTEM_PROBABILITY = 0.2
MULTI_TURN_PROBABILITY = 0.1
FOLLOW_UP_PREFIXES: tuple[str, ...] = ("", "Another one. ", "Next: ")

# ---------------------------------------------------------------------------------------------
# Families: each template set, and a function from the family's item to (prompt, answer).

TEMPLATES: dict[str, tuple[str, ...]] = {
    "addition": (
        "What is {a} + {b}? Answer with only the number.",
        "Compute {a} + {b}. Reply with just the result.",
        "Add {a} and {b}. Give only the number.",
    ),
    "echo_word": (
        "Return exactly the word {w} and nothing else.",
        "Reply with the single word {w}.",
        "Say {w} and nothing else.",
    ),
    "capital": (
        "What is the capital of {c}? Answer in one word.",
        "Name the capital city of {c}. One word only.",
        "Which city is the capital of {c}? Reply with one word.",
    ),
    "sentiment": (
        "Classify the sentiment as positive or negative. Answer with one word: {s}",
        "Is the following review positive or negative? Answer with one word. Review: {s}",
        "Sentiment (positive or negative) of this sentence: {s}",
    ),
    "repeat_word": (
        "Repeat this word twice: {w}",
        "Write the word {w} two times, separated by a space.",
        "Say {w} twice, with a space in between.",
    ),
    "uppercase": (
        "Write the word {w} in capital letters.",
        "Convert to uppercase: {w}",
        "Uppercase this word and reply with it only: {w}",
    ),
    "count_letters": (
        "How many letters are in the word {w}? Answer with only the number.",
        "Count the letters in {w}. Reply with just the number.",
    ),
}
FAMILIES: tuple[str, ...] = tuple(TEMPLATES)

# Stage 2's named splits, in order, each drawing from one group of families.
STAGE2_SPLITS: dict[str, tuple[str, ...]] = {
    "arithmetic_no_think": ("addition", "count_letters"),
    "instruction_following_no_think": ("echo_word", "repeat_word", "uppercase"),
    "knowledge_no_think": ("capital",),
    "sentiment_no_think": ("sentiment",),
}
STAGE1_SPLIT = "train"

Item = Any  # a family's item: (a, b), a word, a country, or (sentence, label)


def _answer(family: str, item: Item) -> tuple[dict[str, Any], str]:
    """The template fields and the exact answer for one item of a family."""
    if family == "addition":
        a, b = item
        return {"a": a, "b": b}, str(a + b)
    if family == "echo_word":
        return {"w": item}, item
    if family == "capital":
        return {"c": item}, CAPITALS[item]
    if family == "sentiment":
        sentence, label = item
        return {"s": sentence}, label
    if family == "repeat_word":
        return {"w": item}, f"{item} {item}"
    if family == "uppercase":
        return {"w": item}, item.upper()
    if family == "count_letters":
        return {"w": item}, str(len(item))
    raise GptlineageError(f"unknown task family {family!r} (known: {', '.join(FAMILIES)})")


def _sentences(subjects: Sequence[str]) -> list[tuple[str, str]]:
    return [(template.format(n=noun), label)
            for noun in subjects
            for label, templates in (("positive", POSITIVE_SENTENCES), ("negative", NEGATIVE_SENTENCES))
            for template in templates]


def _draw_train_item(family: str, rng: random.Random) -> Item:
    if family == "addition":
        while True:
            a, b = rng.randint(0, ADDITION_MAX), rng.randint(0, ADDITION_MAX)
            if not addition_held_out(a, b):
                return a, b
    if family in ("echo_word", "repeat_word", "uppercase", "count_letters"):
        return rng.choice(TRAIN_WORDS)
    if family == "capital":
        return rng.choice(TRAIN_COUNTRIES)
    if family == "sentiment":
        label = rng.choice(("positive", "negative"))
        templates = POSITIVE_SENTENCES if label == "positive" else NEGATIVE_SENTENCES
        return rng.choice(templates).format(n=rng.choice(TRAIN_SUBJECTS)), label
    raise GptlineageError(f"unknown task family {family!r} (known: {', '.join(FAMILIES)})")


def _held_out_items(family: str) -> list[Item]:
    """Every held-out item of a family, in a fixed order."""
    if family == "addition":
        return [(a, b) for a in range(ADDITION_MAX + 1) for b in range(ADDITION_MAX + 1) if addition_held_out(a, b)]
    if family in ("echo_word", "repeat_word", "uppercase", "count_letters"):
        return list(HELD_OUT_WORDS)
    if family == "capital":
        return list(HELD_OUT_COUNTRIES)
    if family == "sentiment":
        return _sentences(HELD_OUT_SUBJECTS)
    raise GptlineageError(f"unknown task family {family!r} (known: {', '.join(FAMILIES)})")


def make_turn(family: str, rng: random.Random) -> tuple[str, str]:
    """One training (prompt, answer) pair of a family, drawn with `rng`."""
    item = _draw_train_item(family, rng)
    fields, answer = _answer(family, item)
    return rng.choice(TEMPLATES[family]).format(**fields), answer


def make_dialogue(family: str, rng: random.Random) -> dict[str, Any]:
    """One training dialogue: `{"messages": [...], "family": str, "answer": str}`.

    About 1 in 5 starts with a system message and about 1 in 10 has a second user/assistant
    turn of the same family; `answer` is the final assistant message.
    """
    if family not in TEMPLATES:
        raise GptlineageError(f"unknown task family {family!r} (known: {', '.join(FAMILIES)})")
    messages: list[dict[str, str]] = []
    if rng.random() < SYSTEM_PROBABILITY:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    turns = 2 if rng.random() < MULTI_TURN_PROBABILITY else 1
    answer = ""
    for turn in range(turns):
        prompt, answer = make_turn(family, rng)
        if turn > 0:
            prompt = rng.choice(FOLLOW_UP_PREFIXES) + prompt
        messages.append({"role": "user", "content": prompt})
        messages.append({"role": "assistant", "content": answer})
    return {"messages": messages, "family": family, "answer": answer}


def _check_count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GptlineageError(f"{name} must be a positive integer, got {value!r}")


def stage1_dataset(n: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Stage 1 (smol-smoltalk stand-in): one split "train" of `n` dialogues, families mixed."""
    _check_count("stage 1 dialogues", n)
    rng = random.Random(f"{seed}:stage1")
    return {STAGE1_SPLIT: [make_dialogue(rng.choice(FAMILIES), rng) for _ in range(n)]}


def stage2_dataset(n_per_split: int, seed: int) -> dict[str, list[dict[str, Any]]]:
    """Stage 2 (smoltalk2 stand-in): the STAGE2_SPLITS, in order, `n_per_split` dialogues each."""
    _check_count("stage 2 dialogues per split", n_per_split)
    splits: dict[str, list[dict[str, Any]]] = {}
    for split, families in STAGE2_SPLITS.items():
        rng = random.Random(f"{seed}:stage2:{split}")
        splits[split] = [make_dialogue(rng.choice(families), rng) for _ in range(n_per_split)]
    return splits


def suite_capacity() -> dict[str, int]:
    """How many distinct held-out prompts each family can give."""
    return {family: len(_held_out_items(family)) * len(TEMPLATES[family]) for family in FAMILIES}


def prompt_suite(seed: int, n: int) -> list[dict[str, str]]:
    """`n` held-out cases `{"prompt", "expected", "family"}`, families in turn, no prompt twice.

    Prompts use only held-out items, so none occurs in a training dialogue.
    """
    _check_count("suite prompts", n)
    rng = random.Random(f"{seed}:suite")
    capacity = suite_capacity()
    per_family: dict[str, list[dict[str, str]]] = {}
    for index, family in enumerate(FAMILIES):
        wanted = n // len(FAMILIES) + (1 if index < n % len(FAMILIES) else 0)
        if wanted > capacity[family]:
            raise GptlineageError(f"suite prompts: {n} needs {wanted} {family} prompts but only "
                                  f"{capacity[family]} held-out ones exist")
        cases = []
        for item in _held_out_items(family):
            fields, answer = _answer(family, item)
            cases.extend({"prompt": template.format(**fields), "expected": answer, "family": family}
                         for template in TEMPLATES[family])
        per_family[family] = rng.sample(cases, wanted)
    ordered = []
    for position in range(max(len(cases) for cases in per_family.values())):
        ordered.extend(cases[position] for cases in per_family.values() if position < len(cases))
    return ordered


def user_contents(splits: Mapping[str, Iterable[Mapping[str, Any]]]) -> Iterable[str]:
    for rows in splits.values():
        for row in rows:
            for message in row["messages"]:
                if message["role"] == "user":
                    yield message["content"]


def check_held_out(cases: Sequence[Mapping[str, str]], *datasets: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Raise unless no suite prompt occurs, whole or inside, in any training user message."""
    contents = [content for splits in datasets for content in user_contents(splits)]
    exact = set(contents)
    joined = "\n".join(contents)
    for case in cases:
        prompt = case["prompt"]
        if "\n" in prompt or prompt in exact or prompt in joined:
            raise GptlineageError(f"held-out prompt occurs in the training data: {prompt!r}")


# ---------------------------------------------------------------------------------------------
# Writing and reading.

SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+")


def jsonl_line(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False) + "\n"


def dataset_readme(title: str, description: str, split_names: Sequence[str]) -> str:
    """README.md whose YAML front matter declares every split, in the order given."""
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for name in split_names:
        lines += [f"  - split: {name}", f"    path: data/{name}.jsonl"]
    lines += ["---", "", f"# {title}", "", description, "", "Splits (rows):", ""]
    return "\n".join(lines) + "\n"


def write_chat_dataset(directory: str | Path, splits: Mapping[str, Sequence[Mapping[str, Any]]], *,
                       title: str, description: str) -> dict[str, int]:
    """Write `directory/data/{split}.jsonl` and `directory/README.md`; return rows per split."""
    directory = Path(directory)
    if not splits:
        raise GptlineageError(f"{directory}: a dataset needs at least one split")
    for name in splits:
        if not SPLIT_NAME.fullmatch(name):
            raise GptlineageError(f"{directory}: split name {name!r} is not letters, digits and '_'")
    (directory / "data").mkdir(parents=True, exist_ok=True)
    counts = {}
    for name, rows in splits.items():
        with open(directory / "data" / f"{name}.jsonl", "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines(jsonl_line(row) for row in rows)
        counts[name] = len(rows)
    readme = dataset_readme(title, description, list(splits))
    readme += "".join(f"- {name}: {count}\n" for name, count in counts.items())
    (directory / "README.md").write_text(readme, encoding="utf-8", newline="\n")
    return counts


def write_prompt_suite(path: str | Path, cases: Sequence[Mapping[str, str]], settings: Mapping[str, Any]) -> None:
    document = {"schema": SUITE_SCHEMA, "settings": dict(settings),
                "cases": [{"prompt": c["prompt"], "expected": c["expected"], "family": c["family"]} for c in cases]}
    text = json.dumps(document, ensure_ascii=False, indent=2, allow_nan=False) + "\n"
    Path(path).write_text(text, encoding="utf-8", newline="\n")


def read_prompt_suite(path: str | Path) -> dict[str, Any]:
    """Load a prompt suite, with one clear error line if it is missing or malformed."""
    path = Path(path)
    document = read_json(path, "no such file (write it with gptlineage synth-chat)")
    if not isinstance(document, dict) or document.get("schema") != SUITE_SCHEMA:
        raise GptlineageError(f"{path}: schema is not {SUITE_SCHEMA}")
    cases = document.get("cases")
    if not isinstance(cases, list) or not all(
            isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("prompt", "expected", "family"))
            for c in cases):
        raise GptlineageError(f"{path}: cases must be a list of {{prompt, expected, family}} strings")
    return document


def count_chars(splits: Mapping[str, Iterable[Mapping[str, Any]]]) -> int:
    """Characters of all message contents (an estimate of tokens is this over 4)."""
    return sum(len(m["content"]) for rows in splits.values() for row in rows for m in row["messages"])


STAGE1_DESCRIPTION = ("Synthetic stand-in for smol-smoltalk (stage 1): dialogues in the `messages` "
                      "format drawn from task families whose answers are checked exactly. "
                      "Written by `gptlineage synth-chat`.")
STAGE2_DESCRIPTION = ("Synthetic stand-in for smoltalk2 (stage 2): one named split per family group, "
                      "meant to be read round-robin in the order listed. Written by `gptlineage synth-chat`.")


def write_synth_chat(output: str | Path, *, stage1_dialogues: int, stage2_dialogues_per_split: int,
                     suite_prompts: int, seed: int) -> dict[str, Any]:
    """Write `stage1/`, `stage2/` and `prompt-suite.json` under `output`; return a summary.

    The held-out guarantee is checked before anything is written.
    """
    output = Path(output)
    stage1 = stage1_dataset(stage1_dialogues, seed)
    stage2 = stage2_dataset(stage2_dialogues_per_split, seed)
    cases = prompt_suite(seed, suite_prompts)
    check_held_out(cases, stage1, stage2)
    stage1_counts = write_chat_dataset(output / STAGE1_DIR, stage1, title="synthetic chat, stage 1",
                                       description=STAGE1_DESCRIPTION)
    stage2_counts = write_chat_dataset(output / STAGE2_DIR, stage2, title="synthetic chat, stage 2",
                                       description=STAGE2_DESCRIPTION)
    settings = {"seed": seed, "prompts": suite_prompts, "families": list(FAMILIES),
                "held_out": "operand pairs with (7a+3b) mod 13 == 5, words, countries and review "
                            "subjects that no training dialogue draws"}
    write_prompt_suite(output / SUITE_FILE, cases, settings)
    return {
        "stage1": {"splits": stage1_counts, "chars": count_chars(stage1)},
        "stage2": {"splits": stage2_counts, "chars": count_chars(stage2)},
        "suite": {"cases": len(cases), "families": sorted({c["family"] for c in cases})},
    }

