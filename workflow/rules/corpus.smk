# Corpus preparation: text and chat dialogues become GPT-2 token shards (llm.c format), with
# assistant-target masks and dialogue records for the two instruction-tuning stages. One rule
# corpus_<stage> per training stage, each reading its config slice.


rule synth_chat:
    input:
        code=code("synth_chat"),
    output:
        directory("results/synth_chat"),
    log:
        "logs/synth_chat.log",
    conda:
        "../../envs/corpus.yaml"
    params:
        cli=cli("synth_chat"),
    shell:
        "gptlineage synth-chat {params.cli} --output {output} 2> {log}"


for stage in TRAINING_STAGES:

    rule:
        name:
            stage.corpus
        input:
            **corpus_inputs(stage.corpus),
        output:
            directory(f"results/{stage.corpus}"),
        log:
            f"logs/{stage.corpus}.log",
        cache: "omit-software"
        conda:
            "../../envs/corpus.yaml"
        params:
            cli=cli(stage.corpus),
            chat=chat_dataset(stage.corpus),
        shell:
            "gptlineage prepare {params.cli} {params.chat} --output {output} 2> {log}"
