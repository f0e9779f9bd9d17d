"""The task families of the synthetic chat data: each one's prompts, items and exact answers.

A family is one row of `TASK_FAMILIES`: its prompt templates, how a training item is drawn,
its held-out items (reserved for the prompt suite, never drawn for training), and the
template fields and exact answer of an item. The answer is a pure function of the prompt:

    addition       "What is 17 + 25? Answer with only the number."               -> "42"
    echo_word      "Return exactly the word river and nothing else."             -> "river"
    capital        "What is the capital of France? Answer in one word."          -> "Paris"
    sentiment      "Classify the sentiment ...: I loved the film."               -> "positive"
    repeat_word    "Repeat this word twice: cat"                                 -> "cat cat"
    uppercase      "Write the word cat in capital letters."                      -> "CAT"
    count_letters  "How many letters are in the word apple? Answer with only the number." -> "5"

Example (the data is written by `gptlineage synth-chat --seed 1337 --output results/synth_chat`):
    >>> import random
    >>> row = make_dialogue("addition", random.Random(0))
    >>> sorted(row), row["messages"][-1]["role"]
    (['answer', 'family', 'messages'], 'assistant')
    >>> TASK_FAMILIES["uppercase"].solve("cat")
    ({'w': 'cat'}, 'CAT')
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gptlineage.corpus.chat_tables import (
    CAPITALS,
    HELD_OUT_COUNTRIES,
    HELD_OUT_SUBJECTS,
    HELD_OUT_WORDS,
    NEGATIVE_SENTENCES,
    POSITIVE_SENTENCES,
    TRAIN_COUNTRIES,
    TRAIN_SUBJECTS,
    TRAIN_WORDS,
)
from gptlineage.errors import GptlineageError

# ---------------------------------------------------------------------------------------------
# Fixed settings. Operand pairs listed by addition_held_out are for the prompt suite only.

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
# Families: each one's templates, and functions from an rng or an item to its parts.

Item = Any  # a family's item: (a, b), a word, a country, or (sentence, label)


@dataclass(frozen=True)
class TaskFamily:
    """One task family. `draw` gives a training item (never a held-out one), `held_out` every
    held-out item in a fixed order, and `solve` an item's template fields and exact answer."""

    name: str
    templates: tuple[str, ...]
    draw: Callable[[random.Random], Item]
    held_out: Callable[[], list[Item]]
    solve: Callable[[Item], tuple[dict[str, Any], str]]


def draw_addition(rng: random.Random) -> tuple[int, int]:
    while True:
        a, b = rng.randint(0, ADDITION_MAX), rng.randint(0, ADDITION_MAX)
        if not addition_held_out(a, b):
            return a, b


def held_out_additions() -> list[tuple[int, int]]:
    return [(a, b) for a in range(ADDITION_MAX + 1) for b in range(ADDITION_MAX + 1) if addition_held_out(a, b)]


def draw_sentiment(rng: random.Random) -> tuple[str, str]:
    label = rng.choice(("positive", "negative"))
    templates = POSITIVE_SENTENCES if label == "positive" else NEGATIVE_SENTENCES
    return rng.choice(templates).format(n=rng.choice(TRAIN_SUBJECTS)), label


def sentences(subjects: Sequence[str]) -> list[tuple[str, str]]:
    """Every (sentence, label) of the review templates over `subjects`, in a fixed order."""
    return [
        (template.format(n=noun), label)
        for noun in subjects
        for label, templates in (("positive", POSITIVE_SENTENCES), ("negative", NEGATIVE_SENTENCES))
        for template in templates
    ]


def draw_word(rng: random.Random) -> str:
    return rng.choice(TRAIN_WORDS)


def held_out_words() -> list[str]:
    return list(HELD_OUT_WORDS)


def word_family(name: str, templates: tuple[str, ...], answer: Callable[[str], str]) -> TaskFamily:
    """A family whose item is one word, filling the templates' {w}."""
    return TaskFamily(name, templates, draw_word, held_out_words, lambda word: ({"w": word}, answer(word)))


# In this order: a dialogue's family is drawn by position, so reordering changes every dataset.
TASK_FAMILIES: dict[str, TaskFamily] = {
    family.name: family
    for family in (
        TaskFamily(
            "addition",
            (
                "What is {a} + {b}? Answer with only the number.",
                "Compute {a} + {b}. Reply with just the result.",
                "Add {a} and {b}. Give only the number.",
            ),
            draw_addition,
            held_out_additions,
            lambda item: ({"a": item[0], "b": item[1]}, str(item[0] + item[1])),
        ),
        word_family(
            "echo_word",
            (
                "Return exactly the word {w} and nothing else.",
                "Reply with the single word {w}.",
                "Say {w} and nothing else.",
            ),
            lambda word: word,
        ),
        TaskFamily(
            "capital",
            (
                "What is the capital of {c}? Answer in one word.",
                "Name the capital city of {c}. One word only.",
                "Which city is the capital of {c}? Reply with one word.",
            ),
            lambda rng: rng.choice(TRAIN_COUNTRIES),
            lambda: list(HELD_OUT_COUNTRIES),
            lambda country: ({"c": country}, CAPITALS[country]),
        ),
        TaskFamily(
            "sentiment",
            (
                "Classify the sentiment as positive or negative. Answer with one word: {s}",
                "Is the following review positive or negative? Answer with one word. Review: {s}",
                "Sentiment (positive or negative) of this sentence: {s}",
            ),
            draw_sentiment,
            lambda: sentences(HELD_OUT_SUBJECTS),
            lambda item: ({"s": item[0]}, item[1]),
        ),
        word_family(
            "repeat_word",
            (
                "Repeat this word twice: {w}",
                "Write the word {w} two times, separated by a space.",
                "Say {w} twice, with a space in between.",
            ),
            lambda word: f"{word} {word}",
        ),
        word_family(
            "uppercase",
            (
                "Write the word {w} in capital letters.",
                "Convert to uppercase: {w}",
                "Uppercase this word and reply with it only: {w}",
            ),
            str.upper,
        ),
        word_family(
            "count_letters",
            (
                "How many letters are in the word {w}? Answer with only the number.",
                "Count the letters in {w}. Reply with just the number.",
            ),
            lambda word: str(len(word)),
        ),
    )
}
FAMILIES: tuple[str, ...] = tuple(TASK_FAMILIES)


def task_family(name: str) -> TaskFamily:
    if name not in TASK_FAMILIES:
        raise GptlineageError(f"unknown task family {name!r} (known: {', '.join(FAMILIES)})")
    return TASK_FAMILIES[name]


def make_turn(family: TaskFamily, rng: random.Random) -> tuple[str, str]:
    """One training (prompt, answer) pair of a family, drawn with `rng`."""
    fields, answer = family.solve(family.draw(rng))
    return rng.choice(family.templates).format(**fields), answer


def make_dialogue(name: str, rng: random.Random) -> dict[str, Any]:
    """One training dialogue: `{"messages": [...], "family": str, "answer": str}`.

    About 1 in 5 starts with a system message and about 1 in 10 has a second user/assistant
    turn of the same family; `answer` is the final assistant message.
    """
    family = task_family(name)
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
    return {"messages": messages, "family": name, "answer": answer}


def suite_capacity() -> dict[str, int]:
    """How many distinct held-out prompts each family can give."""
    return {name: len(family.held_out()) * len(family.templates) for name, family in TASK_FAMILIES.items()}


def held_out_cases(family: TaskFamily) -> list[dict[str, str]]:
    """Every held-out case `{"prompt", "expected", "family"}` of a family, in a fixed order."""
    cases = []
    for item in family.held_out():
        fields, answer = family.solve(item)
        cases.extend(
            {"prompt": template.format(**fields), "expected": answer, "family": family.name}
            for template in family.templates
        )
    return cases
