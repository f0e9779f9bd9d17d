"""The workflow layer the Snakefile reads: the job graph, the config slices and their check, sweeps, the schema.

Example:
    python -m gptlineage.pipeline.schema --check
"""
