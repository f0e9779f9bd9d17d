# Talking to the instruction-tuned model: the KV-cache check (with certified greedy rollouts),
# the cache benchmark, and the prompt suite, all on the final training stage's model.


rule cache_check:
    input:
        run=getattr(rules, FINAL.train).output[0],
        code=code("cache_check"),
    output:
        directory("results/cache_check"),
    log:
        "logs/cache_check.log",
    conda:
        "../../envs/generation.yaml"
    resources:
        gpu=gpus(config.get("cache_check") or {}),
    params:
        cli=cli("cache_check"),
    shell:
        "gptlineage cache-check {params.cli} --run {input.run} --output {output} 2> {log}"


rule cache_bench:
    input:
        run=getattr(rules, FINAL.train).output[0],
        code=code("cache_bench"),
    output:
        directory("results/cache_bench"),
    log:
        "logs/cache_bench.log",
    conda:
        "../../envs/generation.yaml"
    resources:
        gpu=gpus(config.get("cache_bench") or {}),
    params:
        cli=cli("cache_bench"),
    shell:
        "gptlineage cache-bench {params.cli} --run {input.run} --output {output} 2> {log}"


rule prompt_suite:
    input:
        unpack(lambda wildcards: suite_inputs()),
        run=getattr(rules, FINAL.train).output[0],
        code=code("prompt_suite"),
    output:
        directory("results/prompt_suite"),
    log:
        "logs/prompt_suite.log",
    conda:
        "../../envs/generation.yaml"
    resources:
        gpu=gpus(config.get("prompt_suite") or {}),
    params:
        cli=cli("prompt_suite"),
        suite=suite_flag,
    shell:
        "gptlineage prompt-suite {params.cli} {params.suite} --run {input.run} --output {output} 2> {log}"
