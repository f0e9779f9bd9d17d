# The tabular data chapter: the regression table, then the small MLP trained from CSV and NPY.


rule small_data:
    input:
        unpack(inputs("small_data")),
    output:
        result("small_data"),
    log:
        log_file("small_data"),
    benchmark:
        benchmark_file("small_data")
    conda:
        "../../envs/tabular.yaml"
    threads: 1
    params:
        cli=cli("small_data"),
    shell:
        "gptlineage small-data {params.cli} --output {output} > {log} 2>&1"


rule data_csv:
    input:
        unpack(inputs("data_csv")),
    output:
        result("data_csv"),
    log:
        log_file("data_csv"),
    benchmark:
        benchmark_file("data_csv")
    conda:
        "../../envs/tabular.yaml"
    threads: 1
    params:
        cli=cli("data_csv"),
        csv=CSV_FILE,
    shell:
        "gptlineage data-csv {params.cli} --csv {input.data}/{params.csv} --output {output} > {log} 2>&1"


rule data_npy:
    input:
        unpack(inputs("data_npy")),
    output:
        result("data_npy"),
    log:
        log_file("data_npy"),
    benchmark:
        benchmark_file("data_npy")
    conda:
        "../../envs/tabular.yaml"
    threads: 1
    params:
        cli=cli("data_npy"),
        x=X_FILE,
        y=Y_FILE,
    shell:
        "gptlineage data-npy {params.cli} --x {input.data}/{params.x} --y {input.data}/{params.y} --output {output} > {log} 2>&1"
