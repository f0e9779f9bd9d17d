"""Generation: decoding and sampling (decoding), several prompts decoded together (batched), chat
transcripts and the chat loop (chat), where the model comes from (source), and the checks built on
them (cache_check, cache_bench, prompt_suite).

Example:
    gptlineage generate --run results/sft_stage2 --message "What is the capital of Japan?"
"""
