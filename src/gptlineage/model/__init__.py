"""The GPT-2 model: the network, the fused loss, the KV cache and the Hugging Face mapping.

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/export_hf
"""
