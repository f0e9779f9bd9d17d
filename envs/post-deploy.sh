#!/usr/bin/env bash
# Installs the workflow's own package (gptlineage) into the conda environment of the .yaml next
# to this file. Snakemake runs a copy of this script (under .snakemake/conda/) once, right after it
# creates the environment, with the environment active ($CONDA_PREFIX) and in the directory
# Snakemake runs in: the repository root, where the workflow also reads config.yaml and src/.
# GPTLINEAGE_SOURCE names another checkout. The env file cannot do this itself: a path in it is
# read relative to Snakemake's copy of the file, not to the workflow.
# --editable: jobs run the checkout's src/ (the code each rule lists as its input), so a code
# change needs no new environment. --no-deps: the .yaml lists the dependencies.
# --no-build-isolation, --no-index: nothing is downloaded here (the .yaml brings setuptools).
# Every envs/<family>.post-deploy.sh is a link to this one file (tests/test_envs.py checks it);
# Snakemake reads it through the link.
set -euo pipefail
if [ -z "${CONDA_PREFIX:-}" ]; then
    echo "error: post-deploy: CONDA_PREFIX is not set; Snakemake runs this script in the conda environment it installs into" >&2
    exit 1
fi
source_dir="${GPTLINEAGE_SOURCE:-$PWD}"
if [ ! -f "$source_dir/pyproject.toml" ] || [ ! -f "$source_dir/src/gptlineage/__init__.py" ]; then
    echo "error: post-deploy: $source_dir holds no gptlineage checkout (pyproject.toml, src/gptlineage/); run snakemake from the repository root or set GPTLINEAGE_SOURCE" >&2
    exit 1
fi
"$CONDA_PREFIX/bin/python" -m pip install --no-deps --no-build-isolation --no-index --editable "$source_dir"
"$CONDA_PREFIX/bin/gptlineage" --version
