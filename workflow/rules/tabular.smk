# The tabular data chapter: the regression table, then the small MLP trained from CSV and NPY.


rule small_data:
    input:
        code=code("small_data"),
    output:
        directory("results/small_data"),
    log:
        "logs/small_data.log",
    conda:
        "../../envs/tabular.yaml"
    params:
        cli=cli("small_data"),
    shell:
        "gptlineage small-data {params.cli} --output {output} 2> {log}"


rule data_csv:
    input:
        data=rules.small_data.output[0],
        code=code("data_csv"),
    output:
        directory("results/data_csv"),
    log:
        "logs/data_csv.log",
    conda:
        "../../envs/tabular.yaml"
    params:
        cli=cli("data_csv"),
    shell:
        "gptlineage data-csv {params.cli} --csv {input.data}/small_regression.csv --output {output} 2> {log}"


rule data_npy:
    input:
        data=rules.small_data.output[0],
        code=code("data_npy"),
    output:
        directory("results/data_npy"),
    log:
        "logs/data_npy.log",
    conda:
        "../../envs/tabular.yaml"
    params:
        cli=cli("data_npy"),
    shell:
        "gptlineage data-npy {params.cli} --x {input.data}/small_regression_X.npy --y {input.data}/small_regression_y.npy --output {output} 2> {log}"
