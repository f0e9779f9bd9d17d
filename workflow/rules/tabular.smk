# The tabular data chapter: the regression table, then the small MLP trained from CSV and NPY.


rule small_data:
    output:
        directory("results/small_data"),
    input:
        code=code("small_data"),
    threads: rule_resources("small_data")["threads"]
    resources:
        **job_resources("small_data"),
    conda:
        "../../envs/tabular.yaml"
    params:
        cli=flags(config["small_data"]),
    shell:
        "gptlineage small-data {params.cli} --output {output}"


rule data_csv:
    output:
        directory("results/data_csv"),
    input:
        data="results/small_data",
        code=code("data_csv"),
    threads: rule_resources("data_csv")["threads"]
    resources:
        **job_resources("data_csv"),
    conda:
        "../../envs/tabular.yaml"
    params:
        cli=flags(config["data_csv"]),
    shell:
        "gptlineage data-csv {params.cli} --csv {input.data}/small_regression.csv --output {output}"


rule data_npy:
    output:
        directory("results/data_npy"),
    input:
        data="results/small_data",
        code=code("data_npy"),
    threads: rule_resources("data_npy")["threads"]
    resources:
        **job_resources("data_npy"),
    conda:
        "../../envs/tabular.yaml"
    params:
        cli=flags(config["data_npy"]),
    shell:
        "gptlineage data-npy {params.cli} --x {input.data}/small_regression_X.npy --y {input.data}/small_regression_y.npy --output {output}"
