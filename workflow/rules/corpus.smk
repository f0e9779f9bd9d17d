# Corpus preparation: text and chat dialogues become GPT-2 token shards (llm.c format), with
# assistant-target masks and dialogue records for the two instruction-tuning stages. One rule
# corpus_<stage> per training stage, each reading its config slice.


rule synth_chat:
    input:
        unpack(inputs("synth_chat")),
    output:
        result("synth_chat"),
    log:
        log_file("synth_chat"),
    benchmark:
        benchmark_file("synth_chat")
    conda:
        "../../envs/corpus.yaml"
    threads: 1
    params:
        cli=cli("synth_chat"),
    shell:
        "gptlineage synth-chat {params.cli} --output {output} > {log} 2>&1"


for stage in GRAPH.stages:

    rule:
        name:
            stage.corpus
        input:
            unpack(inputs(stage.corpus)),
            sources=corpus_sources(stage.corpus),
        output:
            result(stage.corpus),
        log:
            log_file(stage.corpus),
        benchmark:
            benchmark_file(stage.corpus)
        cache: CACHE
        conda:
            "../../envs/corpus.yaml"
        threads: 1
        params:
            cli=cli(stage.corpus),
            edges=edge_arguments(stage.corpus),
        shell:
            "gptlineage prepare {params.cli} {params.edges} --output {output} > {log} 2>&1"
