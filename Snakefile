# gptlineage workflow: config, its check, rule families, targets. Rules live in workflow/rules/;
# each one calls a single `gptlineage <command>` that writes an artifact under results/, and logs
# to logs/<rule>.log. Threads and resources: profiles/ (default, applied by itself; slurm).
#
#   snakemake --cores 1 results/data_csv            # default profile (offline, CPU)
#   snakemake --cores 1 results/sft_stage2          # the whole experiment (its deliverable)
#   snakemake --cores 1 all                         # the same, and the data chapter on its own
#   snakemake --configfile config.paper.yaml --cores 1 results/corpus_sft_stage2   # the paper profile


from snakemake.utils import min_version

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"


check_config(config)


include: "workflow/rules/tabular.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/generation.smk"
include: "workflow/rules/reporting.smk"


rule all:
    default_target: True
    input:
        rules.data_csv.output,
        rules.data_npy.output,
        [getattr(rules, stage.corpus).output for stage in TRAINING_STAGES],
        getattr(rules, FINAL.name).output,
