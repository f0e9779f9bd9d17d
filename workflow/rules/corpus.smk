# Corpus preparation: text and chat dialogues become GPT-2 token shards (llm.c format), with
# assistant-target masks and dialogue records for the two instruction-tuning stages.


rule synth_chat:
    output:
        directory("results/synth_chat"),
    input:
        code=code("synth_chat"),
    threads: rule_resources("synth_chat")["threads"]
    resources:
        **job_resources("synth_chat"),
    conda:
        "../../envs/corpus.yaml"
    params:
        cli=flags(config["synth_chat"]),
    shell:
        "gptlineage synth-chat {params.cli} --output {output}"


rule corpus_pretrain:
    output:
        directory("results/corpus_pretrain"),
    input:
        sources=local_sources(config["corpus_pretrain"]),
        code=code("prepare"),
    threads: rule_resources("corpus_pretrain")["threads"]
    resources:
        **job_resources("corpus_pretrain"),
    conda:
        "../../envs/corpus.yaml"
    params:
        cli=flags(config["corpus_pretrain"]),
    shell:
        "gptlineage prepare {params.cli} --output {output}"


rule corpus_continuation:
    output:
        directory("results/corpus_continuation"),
    input:
        sources=local_sources(config["corpus_continuation"]),
        code=code("prepare"),
    threads: rule_resources("corpus_continuation")["threads"]
    resources:
        **job_resources("corpus_continuation"),
    conda:
        "../../envs/corpus.yaml"
    params:
        cli=flags(config["corpus_continuation"]),
    shell:
        "gptlineage prepare {params.cli} --output {output}"


rule sft_data_stage1:
    output:
        directory("results/sft_data_stage1"),
    input:
        sources=local_sources(config["sft_data_stage1"]),
        code=code("prepare"),
    threads: rule_resources("sft_data_stage1")["threads"]
    resources:
        **job_resources("sft_data_stage1"),
    conda:
        "../../envs/corpus.yaml"
    params:
        cli=flags(config["sft_data_stage1"]),
    shell:
        "gptlineage prepare {params.cli} --output {output}"


rule sft_data_stage2:
    output:
        directory("results/sft_data_stage2"),
    input:
        sources=local_sources(config["sft_data_stage2"]),
        code=code("prepare"),
    threads: rule_resources("sft_data_stage2")["threads"]
    resources:
        **job_resources("sft_data_stage2"),
    conda:
        "../../envs/corpus.yaml"
    params:
        cli=flags(config["sft_data_stage2"]),
    shell:
        "gptlineage prepare {params.cli} --output {output}"
