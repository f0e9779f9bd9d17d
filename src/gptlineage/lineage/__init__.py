"""Lineage: artifacts with manifests, their ids, hashes, code closures, walking, verifying and exporting.

This layer imports no torch, so `gptlineage lineage ...` starts fast. Example:
    gptlineage lineage verify results/sft_stage2
"""
