# gptlineage workflow: config, its check, rule families, targets. Rules live in workflow/rules/;
# each one calls a single `gptlineage <command>` that writes an artifact under results/, its whole
# output in logs/<rule>.log and its Snakemake benchmark (time, peak memory) in
# logs/<rule>.benchmark.tsv. Threads and resources: profiles/ (default, applied by itself; slurm).
#
#   snakemake --cores 1 results/data_csv            # default profile (offline, CPU)
#   snakemake --cores 1 results/sft_stage2          # the whole experiment (its deliverable)
#   snakemake --cores 1 all                         # the same, every experiment of a sweep, the data chapter
#   snakemake --cores 1 results/lr_high/sft_stage2  # one named experiment of config's `experiments:`
#   snakemake --configfile config.paper.yaml --cores 1 results/corpus_sft_stage2   # the paper profile


from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config.yaml"


include: "workflow/rules/common.smk"


GRAPH = check_config(config)  # first: its one line names the bad key better than a schema error does
size_by_family(GRAPH.names)  # a profile's train_*/corpus_* entries size every stage's jobs
SWEEP = experiments(config)  # the default experiment ("") and each named one, by name


wildcard_constraints:
    prefix=prefix_pattern(config),


include: "workflow/rules/tabular.smk"
include: "workflow/rules/corpus.smk"
include: "workflow/rules/training.smk"
include: "workflow/rules/generation.smk"
include: "workflow/rules/reporting.smk"


check_rules()  # every job the command modules declare has its rule; the schema is current
validate(config, "workflow/schemas/config.schema.yaml", set_default=False)
drop_cached_benchmarks()


onstart:
    print(start_note())


onsuccess:
    print(success_note(SWEEP))


note_when_up_to_date(SWEEP)  # the pages also after a run with nothing to do (no onsuccess then)


rule all:
    default_target: True
    input:
        SWEEP[""].path("data_csv"),
        SWEEP[""].path("data_npy"),
        [SWEEP[""].path(stage.corpus) for stage in GRAPH.stages],
        [experiment.path(DELIVERABLE) for experiment in SWEEP.values()],
