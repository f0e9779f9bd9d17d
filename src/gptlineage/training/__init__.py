"""Training: configuration and plan, batches, schedule, the loop, checkpoints, data parallelism, traces.

Example:
    gptlineage train --preset quick --data results/corpus_pretrain --steps 20 --output results/train/pretrain
"""
