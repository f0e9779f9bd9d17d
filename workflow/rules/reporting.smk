# Checking and showing the results: the Hugging Face export, the matched comparison against
# transformers' GPT-2, the figures, and the experiment's deliverable results/<final stage>: the
# lineage report (index.html) and key metrics (summary.json) of the final model and every result,
# so asking for it builds the whole experiment.


rule export_hf:
    input:
        run=getattr(rules, FINAL.train).output[0],
        code=code("export_hf"),
    output:
        directory("results/export_hf"),
    log:
        "logs/export_hf.log",
    conda:
        "../../envs/reporting.yaml"
    shell:
        "gptlineage export-hf --run {input.run} --output {output} 2> {log}"


rule matched_compare:
    input:
        run=best("continuation"),
        data=rules.corpus_sft_stage1.output[0],
        code=code("matched_compare"),
    output:
        directory("results/matched_compare"),
    log:
        "logs/matched_compare.log",
    cache: "omit-software"  # Snakemake's between-workflow cache (README: iterating)
    conda:
        "../../envs/reporting.yaml"
    resources:
        gpu=gpus(config.get("matched_compare") or {}),
    params:
        cli=cli("matched_compare"),
    shell:
        "gptlineage matched-compare {params.cli} --run {input.run} --data {input.data} --output {output} 2> {log}"


rule plots:
    input:
        runs=[getattr(rules, stage.train).output[0] for stage in TRAINING_STAGES],
        comparison=rules.matched_compare.output[0],
        code=code("plots"),
    output:
        report(directory("results/plots"), patterns=["{figure}.svg"], category="Figures"),
    log:
        "logs/plots.log",
    conda:
        "../../envs/reporting.yaml"
    params:
        runs=lambda wildcards, input: " ".join(f"--run {run}" for run in input.runs),
    shell:
        "gptlineage plots {params.runs} --comparison {input.comparison} --output {output} 2> {log}"


rule:
    name:
        FINAL.name
    input:
        unpack(lambda wildcards: deliverable_parts()),
        code=code("experiment"),
    output:
        report(directory(f"results/{FINAL.name}"), patterns=["index.html"], category="Lineage"),
    log:
        f"logs/{FINAL.name}.log",
    conda:
        "../../envs/reporting.yaml"
    params:
        parts=parts_flags,
    shell:
        "gptlineage experiment {params.parts} --output {output} 2> {log}"
