"""Generation: full-prefix and KV-cached decoding, sampling, chat, and the checks built on them.

Example:
    gptlineage generate --run results/sft_stage2 --message "What is 7 + 5?"
"""
