"""Answering a prompt suite with fixed settings and scoring the answers: `gptlineage prompt-suite`.

Every case's prompt is one chat message answered greedily with the reference's suite settings, in
the batches `generation.batched` makes; the report gives each output and the exact-match rate,
overall and per family. Exact match: the output, stripped and casefolded, equals the expected answer;
lenient match also accepts the answer followed by a non-alphanumeric character ("Paris.").

The default suite is the reference's nine prompts (`gptlineage/assets/paper-prompt-suite.json`);
`gptlineage synth-chat` writes a held-out suite for the synthetic chat data.

Example:
    gptlineage prompt-suite --run results/sft_stage2 --suite results/synth_chat/prompt-suite.json --output results/prompt_suite
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.progress import Progress
from gptlineage.corpus.tokenizer import gpt2_encoding, tokenizer_identity
from gptlineage.generation import batched
from gptlineage.generation.chat import chat_prompt, complete_batch, not_text
from gptlineage.generation.decoding import check_fits, check_vocabulary
from gptlineage.generation.report_settings import PromptSuiteConfig
from gptlineage.generation.source import check_text_vocabulary
from gptlineage.lineage.locations import store_path
from gptlineage.model.gpt import GPT

SCHEMA = "gptlineage.prompt-suite-report.v2"
SYSTEM = ""  # the reference's suite runs without a system line
DECODER = "cached"  # all cases in one batch through the key/value cache (generation.batched)
MATCH_RULE = "output and expected answer whitespace-stripped and casefolded, then equal"
LENIENT_RULE = (
    "output and expected answer whitespace-stripped and casefolded; equal, or the output starts "
    "with the answer followed by a non-alphanumeric character"
)


def matches_expected(output: str, expected: str) -> bool:
    """Whether an output is exactly the expected answer: both whitespace-stripped and casefolded,
    then equal ("PARIS" is "Paris"; "Paris." and "spring spring" are not "Paris", "spring")."""
    want = expected.strip().casefold()
    return bool(want) and output.strip().casefold() == want


def starts_with_answer(output: str, expected: str) -> bool:
    """The lenient rule: the output is the answer, or starts with it followed by a character that is
    not a letter or digit: "Paris." and "Paris is the capital" match "Paris", "Parisian" does not,
    nor does an answer that is not at the start ("It is Paris")."""
    got, want = output.strip().casefold(), expected.strip().casefold()
    if not want:
        return False
    return got == want or (got.startswith(want) and not got[len(want)].isalnum())


def exact_match(cases: list[dict[str, Any]], verdict: str = "matches") -> dict[str, Any]:
    """Matched and judged counts over the cases with an expected answer; rate None when none has one.
    `verdict`: the case field judged ("matches": exact; "lenient_match": the lenient rule)."""
    judged = [case for case in cases if case[verdict] is not None]
    matched = sum(1 for case in judged if case[verdict])
    return {"matched": matched, "judged": len(judged), "rate": matched / len(judged) if judged else None}


def exact_match_by_family(cases: list[dict[str, Any]], verdict: str = "matches") -> dict[str, dict[str, Any]]:
    """`exact_match` of each family's cases, families in the order they first occur."""
    families = list(dict.fromkeys(case["family"] for case in cases))
    return {family: exact_match([case for case in cases if case["family"] == family], verdict) for family in families}


def check_suite_text(path: Path, suite: dict[str, Any]) -> None:
    """Refuse, before any work, a case whose text the report could not hold (a lone surrogate, "\\ud800")."""
    for number, case in enumerate(suite["cases"], start=1):
        for key in ("prompt", "expected", "family"):
            problem = not_text(case[key])
            if problem is not None:
                raise GptlineageError(f"{path}: case {number}: {key}: {problem}")


def answer_groups(prompts: list[list[int]]) -> list[list[int]]:
    """The case indices `generate_batch` decodes together: sorted by prompt length, BATCH_ROWS at a time.

    Decoding group by group is then the same arithmetic as one call for all (the same rows in
    the same batches), and each group's answers can be printed as soon as it is done."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    return [order[first : first + batched.BATCH_ROWS] for first in range(0, len(order), batched.BATCH_ROWS)]


def case_lines(index: int, count: int, result: dict[str, Any]) -> list[str]:
    """A case as answered: verdict (✓, ✗, or - without an expected answer), family and question; then
    the expected answer and the output (control characters escaped)."""
    verdict = {True: "✓", False: "✗", None: "-"}[result["matches"]]
    expected = "(none)" if result["expected"] is None else repr(result["expected"])
    return [
        f"[{index + 1}/{count}] {verdict} {printable(result['family'])}: {printable(result['prompt'])}",
        f"    expected {printable(expected)}, answer {printable(repr(result['output']))}",
    ]


def judged(case: dict[str, Any], ids: list[int], completion: Any) -> dict[str, Any]:
    output = completion.text.strip()
    expected = case["expected"].strip() or None
    return {
        "prompt": case["prompt"],
        "family": case["family"],
        "expected": expected,
        "output": output,
        "matches": matches_expected(output, expected) if expected is not None else None,
        "lenient_match": starts_with_answer(output, expected) if expected is not None else None,
        "prompt_tokens": len(ids),
        "tokens": list(completion.generation.tokens),
        "stop": completion.stop,
    }


def answer_cases(config: PromptSuiteConfig, model: GPT, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every case answered greedily and judged, each printed as its batch finishes; all must fit before any runs."""
    check_text_vocabulary(model)
    encoding, settings = gpt2_encoding(), config.sampling
    prompts = [chat_prompt(encoding, SYSTEM, [], case["prompt"]) for case in cases]
    for ids in prompts:
        check_vocabulary(ids, model.config.vocab)
        check_fits(len(ids), settings.generate, model.config.context)
    results: list[dict[str, Any]] = [{} for _ in cases]
    progress = Progress(len(cases), "prompt-suite answered")
    print(f"answering {len(cases)} prompts, at most {settings.generate} tokens each", flush=True)
    for group in answer_groups(prompts):
        # Each case answered as the cached decoder answers it alone (generation.batched).
        completions = complete_batch(model, encoding, [prompts[i] for i in group], settings)
        for i, completion in zip(group, completions):
            results[i] = judged(cases[i], prompts[i], completion)
        print("\n".join(line for i in sorted(group) for line in case_lines(i, len(cases), results[i])), flush=True)
        progress.advance(len(group))
    return results


def suite_report(
    config: PromptSuiteConfig, model: GPT, suite: dict[str, Any], parameters: dict[str, Any]
) -> dict[str, Any]:
    """report.json's content: the cases of `suite` (read by `read_prompt_suite`) answered, and the score."""
    results = answer_cases(config, model, suite["cases"])
    score = exact_match(results)
    rate = "n/a" if score["rate"] is None else f"{score['rate']:.4f}"
    lenient = exact_match(results, "lenient_match")
    print(f"exact_match={score['matched']}/{score['judged']} rate={rate} (lenient_match={lenient['matched']})")
    by_family = exact_match_by_family(results)
    for family, family_score in by_family.items():
        family_rate = "n/a" if family_score["rate"] is None else f"{family_score['rate']:.4f}"
        print(f"exact_match[{printable(family)}]={family_score['matched']}/{family_score['judged']} rate={family_rate}")
    settings = {key: store_path(value) if isinstance(value, str) else value for key, value in parameters.items()}
    settings |= {"system": SYSTEM, "sampling": asdict(config.sampling), "decoder": DECODER}
    return {
        "schema": SCHEMA,
        "suite": store_path(config.suite_name),  # a store's file as the store names it, not the job's copy
        "settings": settings,
        "match_rule": MATCH_RULE,
        "lenient_rule": LENIENT_RULE,
        "tokenizer": tokenizer_identity(),
        "cases": results,
        "exact_match": score,
        "exact_match_by_family": by_family,
        "lenient_match": lenient,
        "lenient_match_by_family": exact_match_by_family(results, "lenient_match"),
    }
