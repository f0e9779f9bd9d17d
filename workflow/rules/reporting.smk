# Checking and showing the results: the Hugging Face export, the matched comparison against
# transformers' GPT-2, the figures, and the lineage report of the whole chain.

TRAINING_STAGES = ["pretrain", "continuation", "sft_stage1", "sft_stage2"]


rule export_hf:
    output:
        directory("results/export_hf"),
    input:
        run="results/sft_stage2",
        code=code("export_hf"),
    threads: rule_resources("export_hf")["threads"]
    resources:
        **job_resources("export_hf"),
    conda:
        "../../envs/reporting.yaml"
    shell:
        "gptlineage export-hf --run {input.run} --output {output}"


rule matched_comparison:
    output:
        directory("results/matched_comparison"),
    input:
        start="results/best_continuation",
        data="results/sft_data_stage1",
        code=code("matched_compare"),
    threads: rule_resources("matched_comparison")["threads"]
    resources:
        **job_resources("matched_comparison"),
    conda:
        "../../envs/reporting.yaml"
    params:
        cli=flags(config["matched_comparison"]),
    shell:
        "gptlineage matched-compare {params.cli} --run {input.start} --data {input.data} --output {output}"


rule plots:
    output:
        report(directory("results/plots"), patterns=["{figure}.svg"], category="Figures"),
    input:
        runs=expand("results/{stage}", stage=TRAINING_STAGES),
        comparison="results/matched_comparison",
        code=code("plots"),
    threads: rule_resources("plots")["threads"]
    resources:
        **job_resources("plots"),
    conda:
        "../../envs/reporting.yaml"
    params:
        runs=" ".join(f"--run results/{stage}" for stage in TRAINING_STAGES),
    shell:
        "gptlineage plots {params.runs} --comparison {input.comparison} --output {output}"


rule lineage_report:
    output:
        report(directory("results/lineage_report"), patterns=["index.html"], category="Lineage"),
    input:
        plots="results/plots",
        code=code("lineage"),
    threads: rule_resources("lineage_report")["threads"]
    resources:
        **job_resources("lineage_report"),
    conda:
        "../../envs/reporting.yaml"
    shell:
        "gptlineage lineage report {input.plots} --output {output}"
