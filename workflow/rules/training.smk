# The training chain: pretraining, the continuation, and two stages of assistant-masked
# instruction tuning, each starting from the best saved checkpoint of the stage before. One rule
# train_<stage> per stage, each reading its config slice and its corpus_<stage>; the runs lie in
# results/train/<stage>, their best checkpoints in results/train/best_<stage>.
# A rerun of a training job (a retry after a crash or a preempted cluster job) continues from the
# newest checkpoint the interrupted run left in results/train/.<stage>.work/checkpoints, when that
# checkpoint belongs to the same command; so the profile's retries lose at most checkpoint_every
# updates. With `processes` > 1 in the stage's config, `gptlineage train` itself starts torchrun,
# one process per GPU of the job's allocation.


rule select_best:
    input:
        run=lambda wildcards: getattr(rules, f"train_{wildcards.run}").output[0],
        code=code("select_best"),
    output:
        directory("results/train/best_{run}"),
    log:
        "logs/select_best_{run}.log",
    wildcard_constraints:
        run="|".join(stage.name for stage in TRAINING_STAGES),
    cache: "omit-software"  # Snakemake's between-workflow cache (README: iterating)
    conda:
        "../../envs/training.yaml"
    shell:
        "gptlineage select-best --run {input.run} --output {output} 2> {log}"


for stage in TRAINING_STAGES:

    rule:
        name:
            stage.train
        input:
            **training_inputs(stage),
        output:
            directory(f"results/train/{stage.name}"),
        log:
            f"logs/{stage.train}.log",
        cache: "omit-software"
        conda:
            "../../envs/training.yaml"
        resources:
            **training_resources(config.get(stage.name) or {}),
        params:
            cli=cli(stage.name),
            start=start_flag,
        shell:
            "gptlineage train {params.cli} {params.start} --data {input.data} --output {output} 2> {log}"
