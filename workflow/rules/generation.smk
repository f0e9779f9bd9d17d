# Talking to the instruction-tuned model: the KV-cache check (with certified greedy rollouts),
# the cache benchmark, and the prompt suite, all on the final training stage's model.


rule cache_check:
    input:
        unpack(inputs("cache_check")),
    output:
        result("cache_check"),
    log:
        log_file("cache_check"),
    benchmark:
        benchmark_file("cache_check")
    conda:
        "../../envs/generation.yaml"
    threads: 1
    resources:
        gpu=gpu_count("cache_check"),
    params:
        cli=cli("cache_check"),
    shell:
        "gptlineage cache-check {params.cli} --run {input.run} --output {output} > {log} 2>&1"


rule cache_bench:
    input:
        unpack(inputs("cache_bench")),
    output:
        result("cache_bench"),
    log:
        log_file("cache_bench"),
    benchmark:
        benchmark_file("cache_bench")
    conda:
        "../../envs/generation.yaml"
    threads: 1
    resources:
        gpu=gpu_count("cache_bench"),
    params:
        cli=cli("cache_bench"),
    shell:
        "gptlineage cache-bench {params.cli} --run {input.run} --output {output} > {log} 2>&1"


rule prompt_suite:
    input:
        unpack(inputs("prompt_suite")),
    output:
        result("prompt_suite"),
    log:
        log_file("prompt_suite"),
    benchmark:
        benchmark_file("prompt_suite")
    conda:
        "../../envs/generation.yaml"
    threads: 1
    resources:
        gpu=gpu_count("prompt_suite"),
    params:
        cli=cli("prompt_suite"),
        edges=edge_arguments("prompt_suite"),
    shell:
        "gptlineage prompt-suite {params.cli} {params.edges} --run {input.run} --output {output} > {log} 2>&1"
