"""gptlineage: a GPT-2 training experiment whose every number carries its lineage.

Example:
    snakemake --cores 1 results/data_csv
    gptlineage lineage show results/data_csv
"""

__version__ = "0.1.0"
