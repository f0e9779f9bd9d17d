# Checking and showing the results: the Hugging Face export, the matched comparison against
# transformers' GPT-2, the figures, and the experiment's deliverable results/<final stage>: the
# experiment page (index.html) and key metrics (summary.json) of the final model and every result,
# so asking for it builds the whole experiment. `snakemake --report report.zip` holds the page and
# every figure, with the captions in workflow/report/: one per figure kind (plots.rst picks the loss
# curve's, the time profile's, the overview's or the comparison's by the figure's file name).


rule export_hf:
    input:
        unpack(inputs("export_hf")),
    output:
        result("export_hf"),
    log:
        log_file("export_hf"),
    benchmark:
        benchmark_file("export_hf")
    conda:
        "../../envs/reporting.yaml"
    threads: 1
    shell:
        "gptlineage export-hf --run {input.run} --output {output} > {log} 2>&1"


rule matched_compare:
    input:
        unpack(inputs("matched_compare")),
    output:
        report(
            result("matched_compare"),
            patterns=["{figure}.svg"],
            caption="../report/matched_compare.rst",
            category="{prefix}Matched comparison",
        ),
    log:
        log_file("matched_compare"),
    benchmark:
        benchmark_file("matched_compare")
    cache: CACHE  # Snakemake's between-workflow cache, with --cache (README: old results back)
    conda:
        "../../envs/reporting.yaml"
    threads: 1
    resources:
        gpu=gpu_count("matched_compare"),
    params:
        cli=cli("matched_compare"),
    shell:
        "gptlineage matched-compare {params.cli} --run {input.run} --data {input.data} --output {output} > {log} 2>&1"


rule plots:
    input:
        unpack(inputs("plots")),
    output:
        report(
            result("plots"),
            patterns=["{figure}.svg"],
            caption="../report/plots.rst",
            category="{prefix}Figures",
            labels={"figure": "{figure}"},
        ),
    log:
        log_file("plots"),
    benchmark:
        benchmark_file("plots")
    conda:
        "../../envs/reporting.yaml"
    threads: 1
    params:
        runs=plot_runs,
    shell:
        "gptlineage plots {params.runs} --comparison {input.comparison} --output {output} > {log} 2>&1"


rule:
    name:
        DELIVERABLE
    input:
        unpack(inputs(DELIVERABLE)),
    output:
        report(
            result(DELIVERABLE),
            patterns=["{page}.html"],
            caption="../report/experiment.rst",
            category="{prefix}Experiment",
        ),
    log:
        log_file(DELIVERABLE),
    benchmark:
        benchmark_file(DELIVERABLE)
    conda:
        "../../envs/reporting.yaml"
    threads: 1
    params:
        parts=parts_flags,
        name=experiment_name,
    shell:
        "gptlineage experiment {params.parts} {params.name} --output {output} > {log} 2>&1"
