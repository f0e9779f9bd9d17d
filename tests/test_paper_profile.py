"""The paper profile (config.paper.yaml) plans what the reference ran: the continuation's skip
derived from the first corpus's manifest, and the cache check and benchmark without a system
line (prompts of 9 and 8 tokens), the benchmark with sampling seed 0."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from snakemake.utils import update_config

from gptlineage.corpus.tokenizer import gpt2_encoding
from gptlineage.generation.chat import chat_prompt
from gptlineage.pipeline.graph import edges
from gptlineage.pipeline.slices import config_error

REPO = Path(__file__).resolve().parent.parent


def paper_config() -> dict:
    config = yaml.safe_load((REPO / "config.yaml").read_text())
    update_config(config, yaml.safe_load((REPO / "config.paper.yaml").read_text()))
    return config


@pytest.fixture(scope="module")
def paper_plan(tmp_path_factory) -> dict[str, str]:
    """Each planned rule's shell command in a dry run of the paper profile."""
    workdir = tmp_path_factory.mktemp("paper")
    for name in ("Snakefile", "config.yaml", "config.paper.yaml"):
        shutil.copy(REPO / name, workdir / name)
    for name in ("workflow", "profiles", "src", "envs", "data"):
        shutil.copytree(REPO / name, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
    targets = ["results/cache_check", "results/cache_bench", "results/corpus_continuation"]
    command = [sys.executable, "-m", "snakemake", "--cores", "1", "--dry-run", "--printshellcmds"]
    done = subprocess.run(
        [*command, "--configfile", "config.paper.yaml", "--", *targets],
        cwd=workdir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout + done.stderr
    shells = re.findall(r"^rule (\w+):.*?^Shell command: (.*?)$", text, flags=re.MULTILINE | re.DOTALL)
    return dict(shells)


def test_the_continuation_reads_its_skip_from_the_first_corpus(paper_plan):
    shell = paper_plan["corpus_continuation"]
    assert "--skip-documents-from results/corpus_pretrain" in shell
    assert "--skip-documents " not in shell and "964709" not in shell
    assert "corpus_pretrain" in edges(paper_config())["corpus_continuation"]


def test_the_cache_check_and_benchmark_run_as_the_reference_ran_them(paper_plan):
    check, bench = paper_plan["cache_check"], paper_plan["cache_bench"]
    assert "--system ''" in check and "--message 'Hello!'" in check
    assert "--system ''" in bench and "--seed 0" in bench and "--message hey" in bench
    encoding = gpt2_encoding()
    assert [len(chat_prompt(encoding, "", [], message)) for message in ("Hello!", "hey")] == [9, 8]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        pytest.param(
            "corpus_pretrain",
            "previous_corpus",
            "invalid config: key corpus_pretrain.skip_documents_from: must be one of null, got 'previous_corpus'",
            id="skip-after-nothing-first-stage",
        ),
        pytest.param(
            "corpus_continuation",
            "results/corpus_pretrain",
            "invalid config: key corpus_continuation.skip_documents_from: must be one of null, previous_corpus,"
            " got 'results/corpus_pretrain'",
            id="skip-after-a-path",
        ),
    ],
)
def test_a_bad_skip_source_is_one_line_naming_the_key(name, value, message):
    config = paper_config()
    config[name] = {**config[name], "skip_documents_from": value}
    assert config_error(config) == message


def test_a_skip_count_with_a_skip_source_is_refused():
    config = paper_config()
    config["corpus_continuation"] = {**config["corpus_continuation"], "skip_documents": 3}
    assert config_error(config) == (
        "invalid config: key corpus_continuation.skip_documents_from: --skip-documents-from and --skip-documents"
        " exclude each other: pass one of them"
    )
