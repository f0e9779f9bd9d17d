# gptlineage workflow: config, schema validation, rule families, targets. Rules live in
# workflow/rules/; each one calls a single `gptlineage <command>` that writes an artifact.
#
#   snakemake --cores 1 results/data_csv            # default profile (offline, CPU)
#   snakemake --cores 1 results/sft_stage2          # the whole README experiment
#   snakemake --configfile config.paper.yaml --cores 1 results/sft_stage2   # the paper profile

from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"


validate_config(config, "workflow/schemas/config.schema.yaml")

include: "workflow/rules/tabular.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/generation.smk"
include: "workflow/rules/reporting.smk"


rule all:
    default_target: True
    input:
        "results/data_csv",
        "results/data_npy",
        "results/corpus_pretrain",
        "results/corpus_continuation",
        "results/sft_stage2",
        "results/cache_check",
        "results/cache_benchmark",
        "results/prompt_suite",
        "results/export_hf",
        "results/matched_comparison",
        "results/plots",
        "results/lineage_report",
