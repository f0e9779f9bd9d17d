# The training chain: pretraining, the continuation, and two stages of assistant-masked
# instruction tuning, each starting from the best saved checkpoint of the stage before. Rules
# train_<stage> and select_best_<stage> per stage, each training reading its config slice and its
# corpus_<stage>; the runs lie in results/train/<stage>, their best checkpoints in
# results/train/best_<stage>.
# A rerun of a training job (a retry after a crash or a preempted cluster job) continues from the
# newest checkpoint the interrupted run left in results/train/.<stage>.work/checkpoints, when that
# checkpoint belongs to the same command; so the profile's retries lose at most checkpoint_every
# updates. With `processes` > 1 in the stage's config, `gptlineage train` itself starts torchrun,
# one process per GPU of the job's allocation.
# Each training job also writes live TensorBoard curves to results/train/tensorboard/<stage>
# (tensorboard_flag): beside the artifacts, never inside one, no output of the rule and no part
# of any id, so `tensorboard --logdir results/train` shows the stages as runs while they train.


def tensorboard_flag(stage):
    """A params function: --tensorboard results/[<experiment>/]train/tensorboard/<stage>, the
    folder beside the stage's output directory that its TensorBoard event files go to (beside the
    job's local copy of it under a default storage provider: the store receives artifacts only)."""

    def flag(wildcards, output):
        return f"--tensorboard {Path(str(output[0])).parent / 'tensorboard' / stage.name}"

    return flag


for stage in GRAPH.stages:

    rule:
        name:
            stage.train
        input:
            unpack(inputs(stage.train)),
        output:
            result(stage.train),
        log:
            log_file(stage.train),
        benchmark:
            benchmark_file(stage.train)
        cache: CACHE
        conda:
            "../../envs/training.yaml"
        threads: 1
        resources:
            **stage_resources(stage),
        params:
            cli=cli(stage.name),
            edges=edge_arguments(stage.train),
            tensorboard=tensorboard_flag(stage),
        shell:
            "gptlineage train {params.cli} {params.edges} {params.tensorboard} --data {input.data} --output {output} > {log} 2>&1"

    rule:
        name:
            f"select_best_{stage.name}"
        input:
            unpack(inputs(f"select_best_{stage.name}")),
        output:
            result(f"select_best_{stage.name}"),
        log:
            log_file(f"select_best_{stage.name}"),
        benchmark:
            benchmark_file(f"select_best_{stage.name}")
        cache: CACHE  # Snakemake's between-workflow cache, with --cache (README: old results back)
        conda:
            "../../envs/training.yaml"
        threads: 1
        shell:
            "gptlineage select-best --run {input.run} --output {output} > {log} 2>&1"
