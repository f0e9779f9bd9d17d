# The training chain: pretraining, the continuation, and two stages of assistant-masked
# instruction tuning, each starting from the best saved checkpoint of the stage before.
# A rerun of a training job (a retry after a crash or a preempted cluster job) continues from the
# newest checkpoint the interrupted run left in results/.<stage>.work/checkpoints, when that
# checkpoint belongs to the same command; so the profile's retries lose at most checkpoint_every updates.
# With `processes` > 1 in the stage's config, `gptlineage train` itself starts torchrun, one
# process per GPU of the job's allocation.


rule pretrain:
    output:
        directory("results/pretrain"),
    input:
        data="results/corpus_pretrain",
        code=code("train"),
    threads: rule_resources("pretrain")["threads"]
    resources:
        **job_resources("pretrain"),
    conda:
        "../../envs/training.yaml"
    params:
        cli=flags(config["pretrain"]),
    shell:
        "gptlineage train {params.cli} --data {input.data} --output {output}"


rule select_best:
    output:
        directory("results/best_{run}"),
    input:
        run="results/{run}",
        code=code("select_best"),
    wildcard_constraints:
        run="pretrain|continuation|sft_stage1|sft_stage2",
    threads: rule_resources("select_best")["threads"]
    resources:
        **job_resources("select_best"),
    conda:
        "../../envs/training.yaml"
    shell:
        "gptlineage select-best --run {input.run} --output {output}"


rule continuation:
    output:
        directory("results/continuation"),
    input:
        data="results/corpus_continuation",
        start="results/best_pretrain",
        code=code("train"),
    threads: rule_resources("continuation")["threads"]
    resources:
        **job_resources("continuation"),
    conda:
        "../../envs/training.yaml"
    params:
        cli=flags(config["continuation"]),
    shell:
        "gptlineage train {params.cli} --data {input.data} --load-params {input.start}/parameters.safetensors --output {output}"


rule sft_stage1:
    output:
        directory("results/sft_stage1"),
    input:
        data="results/sft_data_stage1",
        start="results/best_continuation",
        code=code("train"),
    threads: rule_resources("sft_stage1")["threads"]
    resources:
        **job_resources("sft_stage1"),
    conda:
        "../../envs/training.yaml"
    params:
        cli=flags(config["sft_stage1"]),
    shell:
        "gptlineage train {params.cli} --data {input.data} --load-params {input.start}/parameters.safetensors --output {output}"


rule sft_stage2:
    output:
        directory("results/sft_stage2"),
    input:
        data="results/sft_data_stage2",
        start="results/best_sft_stage1",
        code=code("train"),
    threads: rule_resources("sft_stage2")["threads"]
    resources:
        **job_resources("sft_stage2"),
    conda:
        "../../envs/training.yaml"
    params:
        cli=flags(config["sft_stage2"]),
    shell:
        "gptlineage train {params.cli} --data {input.data} --load-params {input.start}/parameters.safetensors --output {output}"
