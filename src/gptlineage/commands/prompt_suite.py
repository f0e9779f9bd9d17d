"""Run a prompt suite through a checkpoint with fixed settings and score the answers.

Every case's prompt is asked as one chat message with no system line and answered greedily
(top-k 1, temperature 1.0, seed 0, the repetition penalty of `generate`), at most
--generate (48) new tokens: the reference's suite settings. report.json lists each prompt,
its output and, where the suite gives an expected answer (a non-empty `expected`), whether
the output matches it, plus the exact-match rate over those cases.

An output matches when, whitespace-stripped and compared case-insensitively, it equals the
expected answer or starts with it followed by a character that is not a letter or digit
("Paris." or "Paris is the capital." match "Paris"; "Parisian" and "It is Paris." do not).

The default suite is the reference's nine prompts (`gptlineage/assets/paper-prompt-suite.json`);
`gptlineage synth-chat` writes a held-out suite for the synthetic chat data.

Example:
    gptlineage prompt-suite --run results/sft_stage2 --suite results/synth_chat/prompt-suite.json --output results/prompt_suite
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gptlineage.lineage.artifact import ArtifactWriter
from gptlineage.jsonio import write_json_atomic
from gptlineage.commands.generate import (
    add_model_arguments,
    check_text_vocabulary,
    load_model,
    model_inputs,
    model_source,
)
from gptlineage.errors import GptlineageError
from gptlineage.generation.decoding import (
    SamplingSettings,
    chat_prompt,
    check_fits,
    check_vocabulary,
    complete,
    make_decoder,
    matches_expected,
)
from gptlineage.corpus.synth_chat import read_prompt_suite
from gptlineage.corpus.tokenizer import gpt2_encoding, tokenizer_identity

NAME = "prompt-suite"
EXAMPLE = ("gptlineage prompt-suite --run results/sft_stage2 --suite results/synth_chat/prompt-suite.json "
           "--output results/prompt_suite")
PAPER_SUITE = Path(__file__).resolve().parent.parent / "assets" / "paper-prompt-suite.json"
SYSTEM = ""  # the reference's suite runs without a system line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument("--suite", type=Path, default=PAPER_SUITE,
                        help="prompt suite (gptlineage.prompt-suite.v1; default: the reference's nine prompts)")
    parser.add_argument("--generate", type=int, default=48, help="new tokens at most per answer (default 48)")
    parser.add_argument("--output", type=Path, required=True, help="artifact directory to write (report.json)")


def suite_settings(max_new_tokens: int) -> SamplingSettings:
    """The fixed settings: greedy, seed 0, temperature 1.0, the generator's repetition penalty."""
    return SamplingSettings(temperature=1.0, top_k=1, seed=0, max_new_tokens=max_new_tokens)


def exact_match(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Matched and judged counts over the cases with an expected answer; rate None when none has one."""
    judged = [case for case in cases if case["matches"] is not None]
    matched = sum(1 for case in judged if case["matches"])
    return {"matched": matched, "judged": len(judged), "rate": matched / len(judged) if judged else None}


def run(args: argparse.Namespace) -> int:
    if args.generate <= 0:
        raise GptlineageError(f"--generate must be positive, got {args.generate}")
    suite = read_prompt_suite(args.suite)
    source = model_source(args)
    model = load_model(source)
    check_text_vocabulary(model)
    encoding = gpt2_encoding()
    settings = suite_settings(args.generate)
    prompts = [chat_prompt(encoding, SYSTEM, [], case["prompt"]) for case in suite["cases"]]
    for ids in prompts:  # every case must fit before any is run
        check_vocabulary(ids, model.config.vocab)
        check_fits(len(ids), settings.max_new_tokens, model.config.context)
    decoder = make_decoder(model, "cached")
    results = []
    for index, (case, ids) in enumerate(zip(suite["cases"], prompts)):
        completion = complete(decoder, encoding, ids, settings, context=model.config.context)
        output = completion.text.strip()
        expected = case["expected"].strip() or None
        matches = matches_expected(output, expected) if expected is not None else None
        results.append({"prompt": case["prompt"], "family": case["family"], "expected": expected, "output": output,
                        "matches": matches, "prompt_tokens": len(ids), "tokens": list(completion.generation.tokens),
                        "stop": completion.stop})
        verdict = "-" if matches is None else str(matches).lower()
        print(f"[{index + 1}] matches={verdict} output={output!r}", flush=True)
    score = exact_match(results)
    rate = "n/a" if score["rate"] is None else f"{score['rate']:.4f}"
    print(f"exact_match={score['matched']}/{score['judged']} rate={rate}")
    # The packaged suite is named by its place in the package, not this machine's path.
    suite_name = "gptlineage/assets/paper-prompt-suite.json" if args.suite == PAPER_SUITE else str(args.suite)
    parameters = {"model": source.parameters(), "suite": suite_name, "system": SYSTEM,
                  "sampling": asdict(settings), "decoder": "cached"}
    with ArtifactWriter(args.output, command=NAME, parameters=parameters,
                        inputs={"suite": args.suite, **model_inputs(source)}, device=source.device) as artifact:
        write_json_atomic(artifact.path / "report.json", {
            "schema": "gptlineage.prompt-suite-report.v1", "suite": suite_name, "settings": parameters,
            "match_rule": ("output and expected answer whitespace-stripped and casefolded; a match when equal, or when "
                           "the output starts with the answer followed by a non-alphanumeric character"),
            "tokenizer": tokenizer_identity(), "cases": results, "exact_match": score})
        artifact.summary = {"exact_match": score}
    print(f"wrote report: {args.output / 'report.json'}")
    return 0
