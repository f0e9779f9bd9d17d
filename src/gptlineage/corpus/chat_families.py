"""The task families of the synthetic chat data: each one's prompts, items and exact answers.

A family is one row of `TASK_FAMILIES`: its training and held-out suite templates, how items are
drawn (docs/generation.md says what each family holds out), and an item's exact answer, a pure
function of the prompt:

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
    (['answer', 'family', 'messages', 'turn_families'], 'assistant')
    >>> TASK_FAMILIES["uppercase"].solve("cat")
    ({'w': 'cat'}, 'CAT')
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.corpus.chat_tables import (
    CAPITALS,
    COUNTRIES,
    HELD_OUT_SUBJECTS,
    NEGATIVE_SENTENCES,
    POSITIVE_SENTENCES,
    TRAIN_SUBJECTS,
    WORDS,
)

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
# A dialogue of a word family whose second turn asks another word family about the same word
# ("cat twice" -> "cat cat", then "cat in capitals" -> "CAT"): the same word under two
# instructions, so only the instruction tells the answers apart.
CONTRAST_PROBABILITY = 0.25
WORD_FAMILIES = ("echo_word", "repeat_word", "uppercase", "count_letters")
FOLLOW_UP_PREFIXES: tuple[str, ...] = ("", "Another one. ", "Next: ")

# ---------------------------------------------------------------------------------------------
# Families: each one's templates, and functions from an rng or an item to its parts.

Item = Any  # a family's item: (a, b), a word, a country, or (sentence, label)


@dataclass(frozen=True)
class TaskFamily:
    """One task family. Training dialogues fill `templates` with items from `draw` (never a
    held-out one); the suite fills `suite_templates` (phrasings no training dialogue uses) with
    `suite_items`, every item the suite may ask about, in a fixed order. `solve` gives an
    item's template fields and exact answer."""

    name: str
    templates: tuple[str, ...]
    suite_templates: tuple[str, ...]
    draw: Callable[[random.Random], Item]
    suite_items: Callable[[], list[Item]]
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
    return rng.choice(WORDS)


def word_family(
    name: str, templates: tuple[str, ...], suite_templates: tuple[str, ...], answer: Callable[[str], str]
) -> TaskFamily:
    """A family whose item is one word, filling the templates' {w}; the suite asks every word."""
    return TaskFamily(
        name, templates, suite_templates, draw_word, lambda: list(WORDS), lambda word: ({"w": word}, answer(word))
    )


# In this order: a dialogue's family is drawn by position, so reordering changes every dataset.
# Each family's suite templates say the same thing as its training templates in other words
# (the task's key word kept: "plus", "uppercase", "twice", ...); none is a training template.
TASK_FAMILIES: dict[str, TaskFamily] = {
    family.name: family
    for family in (
        TaskFamily(
            "addition",
            (
                "What is {a} + {b}? Answer with only the number.",
                "Compute {a} + {b}. Reply with just the result.",
                "Add {a} and {b}. Give only the number.",
                "{a} + {b} = ? Reply with the number only.",
                "Calculate the sum of {a} and {b}. Only the number.",
                "What do {a} and {b} add up to? Just the number.",
                "Find {a} plus {b}. Answer with the number alone.",
                "Sum {a} and {b} and reply with only the result.",
            ),
            (
                "What is the sum of {a} and {b}? Reply with only the number.",
                "Please add {a} to {b} and give just the number.",
                "How much is {a} plus {b}? Answer with the number only.",
                "Work out {a} + {b} and reply with nothing but the number.",
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
                "Echo this word back: {w}",
                "Type the word {w} and nothing more.",
                "Respond with only this word: {w}",
                "Output the word {w}, nothing else.",
                "Just write {w}.",
                # The frames of the other word families, asking for the word once: a frame alone
                # never tells the task, only the instruction word does.
                "Write the word {w} one time.",
                "Give the word {w} once.",
                "Output {w} once, exactly as written.",
                "Write this word one time, unchanged: {w}",
                # "only"/"just" ask for the word once; no twice-frame holds them.
                "Write just this word: {w}",
                "Give only the word {w}.",
            ),
            (
                "Please answer with just the word {w}.",
                "Give me back the word {w} and nothing else.",
                "Your whole reply must be the word {w}.",
                "Write only this word: {w}",
            ),
            lambda word: word,
        ),
        TaskFamily(
            "capital",
            (
                "What is the capital of {c}? Answer in one word.",
                "Name the capital city of {c}. One word only.",
                "Which city is the capital of {c}? Reply with one word.",
                "{c} has which city as its capital? One word.",
                "Tell me the capital of {c}. Just the city name.",
                "Capital of {c}? Answer with the city only.",
            ),
            (
                "What city is the capital of {c}? Answer with one word.",
                "Please name the capital of {c}, one word only.",
                "The capital city of {c} is called what? Reply in one word.",
                "Give the capital city of {c}. Only the name.",
            ),
            lambda rng: rng.choice(COUNTRIES),
            lambda: list(COUNTRIES),
            lambda country: ({"c": country}, CAPITALS[country]),
        ),
        TaskFamily(
            "sentiment",
            (
                "Classify the sentiment as positive or negative. Answer with one word: {s}",
                "Is the following review positive or negative? Answer with one word. Review: {s}",
                "Sentiment (positive or negative) of this sentence: {s}",
                "Positive or negative? {s}",
                "Label this review as positive or negative: {s}",
                "Tell me if this is positive or negative. Text: {s}",
            ),
            (
                "Is this sentence positive or negative? Reply with one word: {s}",
                "Decide whether the review is positive or negative: {s}",
                "What is the sentiment of this review, positive or negative? {s}",
                "Answer positive or negative for this text: {s}",
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
                "Type {w} two times in a row.",
                "Give the word {w} twice.",
                "Double this word: {w}",
                "Output {w} twice, space separated.",
                "Write this word two times: {w}",
                # The echo family's frames, asking for the word twice (see echo_word).
                "Return exactly the word {w} two times and nothing more.",
                "Type the word {w} twice and nothing more.",
                "Respond with this word, twice: {w}",
                "Output the word {w} twice, nothing else.",
                "Just write {w} two times.",
            ),
            (
                "Please say the word {w} two times.",
                "Reply with {w} twice and nothing else.",
                "Repeat the word {w} two times, separated by a space.",
                "Print {w} twice.",
            ),
            lambda word: f"{word} {word}",
        ),
        word_family(
            "uppercase",
            (
                "Write the word {w} in capital letters.",
                "Convert to uppercase: {w}",
                "Uppercase this word and reply with it only: {w}",
                "Make this word all caps: {w}",
                "Give {w} in upper case.",
                "Spell {w} in capital letters.",
                "Rewrite {w} using only uppercase letters.",
                "Capitalize every letter of {w}.",
                # The echo family's frames, asking for capitals (see echo_word).
                "Return exactly the word {w} in capital letters and nothing more.",
                "Type the word {w} in uppercase and nothing more.",
                "Respond with only this word, in capitals: {w}",
                "Output the word {w} in all caps, nothing else.",
                "Just write {w} in upper case.",
            ),
            (
                "Please write {w} in all capital letters.",
                "Turn this word into uppercase: {w}",
                "Reply with the word {w} in uppercase and nothing else.",
                "Change {w} to capital letters.",
            ),
            str.upper,
        ),
        word_family(
            "count_letters",
            (
                "How many letters are in the word {w}? Answer with only the number.",
                "Count the letters in {w}. Reply with just the number.",
                "How long is the word {w} in letters? Only the number.",
                "Number of letters in {w}? Just the number.",
                "Tell me how many letters {w} has. Answer with a number.",
                "What is the letter count of {w}? Reply with the number only.",
            ),
            (
                "How many letters does the word {w} have? Reply with just the number.",
                "Count how many letters are in {w} and answer with only the number.",
                "What is the number of letters in the word {w}? Only the number.",
                "Give the letter count of the word {w}. Just the number.",
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
    turn of the same family; a word family's dialogue instead asks, 1 time in 4, a second word
    family about the same word (`turn_families` names each turn's family); `answer` is the
    final assistant message.
    """
    family = task_family(name)
    messages: list[dict[str, str]] = []
    if rng.random() < SYSTEM_PROBABILITY:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if name in WORD_FAMILIES and rng.random() < CONTRAST_PROBABILITY:
        word = draw_word(rng)
        other = task_family(rng.choice([f for f in WORD_FAMILIES if f != name]))
        turns = [word_turn(family, word, rng), word_turn(other, word, rng)]
        families = [name, other.name]
    else:
        count = 2 if rng.random() < MULTI_TURN_PROBABILITY else 1
        turns = [make_turn(family, rng) for _ in range(count)]
        families = [name] * count
    for turn, (prompt, answer) in enumerate(turns):
        if turn > 0:
            prompt = rng.choice(FOLLOW_UP_PREFIXES) + prompt
        messages.append({"role": "user", "content": prompt})
        messages.append({"role": "assistant", "content": answer})
    return {"messages": messages, "family": name, "answer": turns[-1][1], "turn_families": families}


def word_turn(family: TaskFamily, word: str, rng: random.Random) -> tuple[str, str]:
    """A training (prompt, answer) pair of a word family about WORD."""
    fields, answer = family.solve(word)
    return rng.choice(family.templates).format(**fields), answer


def suite_capacity() -> dict[str, int]:
    """How many distinct held-out prompts each family can give."""
    return {name: len(family.suite_items()) * len(family.suite_templates) for name, family in TASK_FAMILIES.items()}


def held_out_cases(family: TaskFamily) -> list[dict[str, str]]:
    """Every held-out case `{"prompt", "expected", "family"}` of a family, in a fixed order:
    each suite item in each suite template."""
    cases = []
    for item in family.suite_items():
        fields, answer = family.solve(item)
        cases.extend(
            {"prompt": template.format(**fields), "expected": answer, "family": family.name}
            for template in family.suite_templates
        )
    return cases
