"""The GPT-2 model: its shape (no torch), the network, the fused loss, the KV cache, the Hugging Face
mapping, its parameter files (safetensors) and the statements its passports cite (training and decoding).

Example:
    gptlineage export-hf --run results/sft_stage2 --output results/export_hf
"""
