"""Corpora: the GPT-2 tokenizer, token shards, dialogues with assistant masks, prepare and synthetic chat.

Example:
    gptlineage prepare --input data/shakespeare/plays.jsonl.gz --output results/corpus_pretrain
"""
