"""Reporting: plots, the matched comparison against Hugging Face GPT-2, and the HTML lineage page.

Example:
    gptlineage plots --run results/train/pretrain --output results/plots
"""
