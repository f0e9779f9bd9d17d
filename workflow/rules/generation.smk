# Talking to the instruction-tuned model: the KV-cache check (with certified greedy rollouts),
# the cache benchmark, and the prompt suite, all on the sft_stage2 checkpoint.


rule cache_check:
    output:
        directory("results/cache_check"),
    input:
        run="results/sft_stage2",
        code=code("cache_check"),
    threads: rule_resources("cache_check")["threads"]
    resources:
        **job_resources("cache_check"),
    conda:
        "../../envs/generation.yaml"
    params:
        cli=flags(config["cache_check"]),
    shell:
        "gptlineage cache-check {params.cli} --run {input.run} --output {output}"


rule cache_benchmark:
    output:
        directory("results/cache_benchmark"),
    input:
        run="results/sft_stage2",
        code=code("cache_bench"),
    threads: rule_resources("cache_benchmark")["threads"]
    resources:
        **job_resources("cache_benchmark"),
    conda:
        "../../envs/generation.yaml"
    params:
        cli=flags(config["cache_benchmark"]),
    shell:
        "gptlineage cache-bench {params.cli} --run {input.run} --output {output}"


rule prompt_suite:
    output:
        directory("results/prompt_suite"),
    input:
        run="results/sft_stage2",
        suite=producer(config["prompt_suite"]["suite"]),
        code=code("prompt_suite"),
    threads: rule_resources("prompt_suite")["threads"]
    resources:
        **job_resources("prompt_suite"),
    conda:
        "../../envs/generation.yaml"
    params:
        cli=flags(config["prompt_suite"]),
    shell:
        "gptlineage prompt-suite {params.cli} --run {input.run} --output {output}"
