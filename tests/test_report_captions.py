"""Snakemake's report: each figure kind has a caption of its own that says what that figure shows.

The captions are rendered here as Snakemake renders them (`snakemake.report`: a Jinja2 template
with `snakemake.wildcards` of the file, then reStructuredText to HTML), once per file that the
rules of workflow/rules/reporting.smk put in the report.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import STAGE_NAMES
from docutils.core import publish_parts
from jinja2 import Environment

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "workflow" / "report"
RULES = (ROOT / "workflow" / "rules" / "reporting.smk").read_text()
# What `gptlineage plots` writes for a chain: {stage}/loss.svg and {stage}/profile.svg per run
# (`plots.run_figures`), overview.svg and comparison.svg; the rule reports them as {figure}.svg.
PLOT_FIGURES = [f"{stage}/{kind}" for stage in STAGE_NAMES for kind in ("loss", "profile")] + ["overview", "comparison"]


def caption(file: str, **wildcards: str) -> str:
    """FILE's caption as the report shows it: plain text of the HTML Snakemake makes of it."""
    snakemake = SimpleNamespace(wildcards=SimpleNamespace(**wildcards))
    text = Environment(trim_blocks=True, lstrip_blocks=True).from_string((REPORT / file).read_text())
    body = publish_parts(text.render(snakemake=snakemake), writer="html")["body"]
    return " ".join(re.sub(r"<[^>]+>", "", body).split())


def kind(figure: str) -> str:
    return figure.rpartition("/")[2]


def test_the_rules_caption_each_reported_output_with_a_file_here():
    named = re.findall(r'caption="\.\./report/([a-z_]+\.rst)"', RULES)
    assert sorted(named) == ["experiment.rst", "matched_compare.rst", "plots.rst"]
    assert all((REPORT / name).is_file() for name in named)


def test_each_figure_kind_has_its_own_caption_that_says_what_it_shows():
    captions = {figure: caption("plots.rst", figure=figure) for figure in PLOT_FIGURES}
    captions["page"] = caption("experiment.rst", page="index")
    by_kind: dict[str, set[str]] = {}
    for figure, text in captions.items():
        by_kind.setdefault(kind(figure), set()).add(re.sub(r"\b(" + "|".join(STAGE_NAMES) + r")\b", "STAGE", text))
    assert sorted(by_kind) == ["comparison", "loss", "overview", "page", "profile"]
    assert all(len(texts) == 1 for texts in by_kind.values()), by_kind  # one caption a kind...
    assert len({next(iter(texts)) for texts in by_kind.values()}) == 5  # ...and no two kinds share one
    says = {
        "loss": ("Loss curve", "training loss", "validation loss", "learning rate"),
        "profile": ("Time profile", "per phase", "Perfetto trace"),
        "overview": ("Overview", "every training stage", "one step axis"),
        "comparison": ("transformers' GPT-2", "difference per update"),
        "page": ("The experiment page", "lineage graph"),
    }
    for figure, text in captions.items():
        assert all(words in text for words in says[kind(figure)]), (figure, text)
        assert "of the training runs" not in text  # no figure falls to the catch-all
    for stage in STAGE_NAMES:
        assert f"training stage {stage}:" in captions[f"{stage}/loss"] and stage in captions[f"{stage}/profile"]


def test_the_comparison_reads_the_same_in_both_artifacts_that_hold_it():
    assert caption("plots.rst", figure="comparison") == caption("matched_compare.rst", figure="comparison")


@pytest.mark.parametrize("figure", ["extra", "pretrain/other"])
def test_a_figure_of_no_known_kind_is_named_not_described_wrongly(figure):
    assert caption("plots.rst", figure=figure) == f"Figure {figure}.svg of the training runs."
