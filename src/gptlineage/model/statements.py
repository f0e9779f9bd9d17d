"""The statements the reference experiment proves in Lean, and the tests here that mirror them.

Each row gives the reference passport's field (`*_theorem`), the Lean name, the statement and the tests
(`file::function`) that check the same property here: evidence about this code, not a proof, since a
test samples inputs; `RUNTIME_BOUNDARY` says where that evidence stops.

Example:
    passport_statements("training")["training_resume_theorem"]["tests"]
    # ['tests/test_train.py::test_k_steps_then_save_restore_and_the_rest_equals_all_steps', ...]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SCOPES = ("training", "generation")


@dataclass(frozen=True)
class Statement:
    """One proved statement of the reference and the tests that mirror it here."""

    key: str  # the reference passport's field name
    theorem: str  # the Lean name, namespace included
    statement: str
    tests: tuple[str, ...]  # "tests/<file>.py::<function>"
    scope: str = "training"  # "training": the trainer's passport; "generation": the decoders


PROPERTIES = "tests/test_properties.py"
STATEMENTS: tuple[Statement, ...] = (
    Statement(
        "training_target_theorem",
        "TorchLeanGPT.causal_window_target_is_next_token",
        "the target at position t of a training window is the corpus token at t + 1",
        (
            f"{PROPERTIES}::test_a_plain_target_is_the_next_token",
            f"{PROPERTIES}::test_a_dialogue_target_is_the_next_token",
            "tests/test_sampler.py::test_plain_batch_rows_are_consecutive_windows",
        ),
    ),
    Statement(
        "training_target_mask_theorem",
        "TorchLeanGPT.causal_window_mask_is_next_target",
        "the loss-mask row t reads the mask of corpus token t + 1, not of its input token",
        (f"{PROPERTIES}::test_b_mask_row_reads_the_mask_of_the_next_token",),
    ),
    Statement(
        "dialogue_record_bound_theorem",
        "TorchLeanGPT.DialogueRecords.target_index_lt_record_end",
        "a row in a record's assistant-target interval predicts a position strictly inside the record's window",
        (
            f"{PROPERTIES}::test_c_target_rows_stay_inside_their_record",
            "tests/test_sampler.py::test_dialogue_rows_stay_inside_their_record",
        ),
    ),
    Statement(
        "dialogue_record_selector_theorem",
        "TorchLeanGPT.DialogueRecords.targetRowEnabled_eq_true_iff",
        "a dialogue row is enabled exactly when it predicts one of the record's assistant targets",
        ("tests/test_sampler.py::test_dialogue_enabled_rows_are_the_records_targets",),
    ),
    Statement(
        "dialogue_padding_theorem",
        "TorchLeanGPT.DialogueRecords.not_target_row_of_record_end_le",
        "no padded row at or after the record's end is a target row",
        (
            f"{PROPERTIES}::test_c_target_rows_stay_inside_their_record",
            "tests/test_sampler.py::test_dialogue_rows_stay_inside_their_record",
        ),
    ),
    Statement(
        "weighted_objective_support_theorem",
        "TorchLeanGPT.weighted_rows_eq_of_eq_on_support",
        "two loss rows that agree wherever the row weight is non-zero give equal weighted totals",
        (
            f"{PROPERTIES}::test_e_rows_agreeing_where_weighted_give_equal_totals",
            f"{PROPERTIES}::test_e_masked_loss_ignores_rows_without_weight",
        ),
    ),
    Statement(
        "causal_attention_theorem",
        "TorchLeanGPT.causal_attention_blocks_future_forward_and_backward",
        "a strictly-future position gets exactly zero attention weight and exactly zero score gradient",
        (
            f"{PROPERTIES}::test_d_causal_softmax_blocks_the_future_forward_and_backward",
            f"{PROPERTIES}::test_d_model_logits_ignore_future_tokens",
            f"{PROPERTIES}::test_d_model_gradient_to_future_embeddings_is_zero",
        ),
    ),
    Statement(
        "training_resume_theorem",
        "TorchLeanGPT.Training.resume_eq_uninterrupted",
        "k steps, then a restored state and the remaining steps, equal all steps run at once",
        (
            "tests/test_train.py::test_k_steps_then_save_restore_and_the_rest_equals_all_steps",
            "tests/test_checkpoint.py::test_resuming_after_three_steps_matches_six_uninterrupted_steps_bit_for_bit",
        ),
    ),
    Statement(
        "cached_decoding_theorem",
        "TorchLeanGPT.CachedDecode.Layered.run_correct",
        "incremental decoding through every layer equals full-prefix recomputation, position by position",
        (
            "tests/test_kvcache.py::test_cache_holds_one_row_per_consumed_position",
            "tests/test_kvcache.py::test_cached_and_full_prefix_greedy_decoding_agree",
        ),
        "generation",
    ),
    Statement(
        "cache_lengths_theorem",
        "TorchLeanGPT.CachedDecode.Layered.represents_cache_lengths",
        "there is one cache per layer, each holding exactly one key/value row per consumed position",
        ("tests/test_kvcache.py::test_cache_holds_one_row_per_consumed_position",),
        "generation",
    ),
    Statement(
        "greedy_rollout_theorem",
        "TorchLeanGPT.Generation.greedy_eq_of_rollout_certified",
        "logits within half the winner's margin at every reached prefix give the same greedy continuation",
        (
            "tests/test_generate.py::test_cache_check_passes_and_writes_its_report",
            "tests/test_generate.py::test_cache_check_fails_beyond_the_tolerance",
        ),
        "generation",
    ),
)

RUNTIME_BOUNDARY: dict[str, Any] = {
    "statement": (
        "The theorem names refer to the reference experiment's specification-level results; here each is"
        " mirrored by tests of this implementation, and device, precision and environment identify the"
        " execution path."
    ),
    "tested": [
        "the batch sampler's index arithmetic (targets, masks, record bounds, padding) on random shards, CPU",
        "causal attention and the model's forward and backward passes on random tiny models, CPU float32 and float64",
        "the weighted loss, full-logits and fused-chunked, on random rows, CPU",
        "resume equals the uninterrupted run, parameters bit for bit, CPU",
        "cached and full-prefix decoding agree (logits within 1e-5, the same greedy tokens) on random tiny models, CPU",
    ],
    "not_tested": [
        "CUDA kernels (attention, matmuls, fused AdamW) and any GPU run: the tests run on CPU; a CUDA run is"
        " compared to another trainer by the matched comparison, a differential check, not a proof",
        "bitwise determinism on CUDA: atomic accumulation may reorder floating-point sums",
        "floating-point rounding: the numeric statements hold up to the tolerances the tests name",
        "reading files: the loaders check each file's shape and bounds at run time instead",
        "the tests sample inputs; they cover what they draw, not every input as a proof does",
    ],
}


def passport_statements(scope: str = "training") -> dict[str, dict[str, Any]]:
    """The statements of one scope as a passport records them, keyed by the reference's field name."""
    if scope not in SCOPES:
        raise ValueError(f"unknown scope '{scope}'; expected one of {', '.join(SCOPES)}")
    return {
        row.key: {"theorem": row.theorem, "statement": row.statement, "tests": list(row.tests)}
        for row in STATEMENTS
        if row.scope == scope
    }
