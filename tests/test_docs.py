"""The README and the manual (docs/): size, links, and the tables and graph that mirror the workflow.

`mkdocs build --strict` (run by .ci/run) checks the links between docs/ pages; these tests check
what it does not see: the README's size, the README's and the other READMEs' links into the tree,
results/README.md's directories against the workflow's jobs, and the README's job graph against
the jobs' real inputs.

Example:
    python -m pytest -q tests/test_docs.py
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from pathlib import Path

import pytest
import yaml
from conftest import DEFAULT_GRAPH, default_config
from test_workflow import upstream_of

from gptlineage.pipeline.graph import DELIVERABLE, edges

REPO = Path(__file__).resolve().parent.parent
README_LIMIT = 12_000  # bytes: the README is the front door; the manual holds the rest
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def pages() -> list[Path]:
    """Every Markdown page a reader follows links in: the READMEs and the manual."""
    named = [REPO / "README.md", *(REPO / folder / "README.md" for folder in ("results", "benchmarks", "profiles"))]
    return named + sorted((REPO / "docs").glob("*.md"))


def prose(text: str) -> str:
    """TEXT without code blocks and inline code, where brackets are no links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as Python-Markdown's toc extension (MkDocs) and GitHub make it."""
    text = unicodedata.normalize("NFKD", heading.replace("`", "")).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", page.read_text()), re.MULTILINE)
    return {slug(heading) for heading in headings}


def broken_links(page: Path) -> list[str]:
    """Each relative link of PAGE whose file (or, into a Markdown page, whose heading) is missing."""
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file of the tree
            continue
        path, _, anchor = target.partition("#")
        found = (page.parent / path).resolve() if path else page
        if not found.exists():
            broken.append(f"{target}: no such file")
        elif anchor and found.suffix == ".md" and anchor not in anchors(found):
            broken.append(f"{target}: no heading with that anchor")
    return broken


def test_the_readme_stays_a_front_door():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move sections into docs/"


def test_the_readme_keeps_the_test_command_ci_runs():
    command = "python -m pytest -q -n 2 --dist loadfile"
    assert command in (REPO / "README.md").read_text()
    assert command in (REPO / ".ci" / "run").read_text()


@pytest.mark.parametrize("page", pages(), ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("[a](missing.md)", ["missing.md: no such file"], id="missing-file"),
        pytest.param("[a](page.md#nowhere)", ["page.md#nowhere: no heading with that anchor"], id="missing-anchor"),
        pytest.param("[a](page.md#a-heading-with-code)", [], id="anchor-of-a-heading-with-code"),
        pytest.param("`[a](missing.md)` and [b](https://example.org/x)", [], id="code-and-urls-are-no-file-links"),
    ],
)
def test_the_link_check_finds_what_is_missing(tmp_path, text, expected):
    (tmp_path / "page.md").write_text("# A heading with `code`\n")
    (tmp_path / "index.md").write_text(text + "\n")
    assert broken_links(tmp_path / "index.md") == expected


def test_every_page_of_the_manual_is_in_the_nav():
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    listed = {next(iter(entry.values())) for entry in nav}
    assert {page.name for page in (REPO / "docs").glob("*.md")} <= listed


def built_jobs(config: dict | None = None) -> set[str]:
    """The jobs `snakemake all` runs on CONFIG (the default: config.yaml): the deliverable,
    everything upstream of it, and the corpora (the `all` rule's other targets)."""
    config = config or default_config()
    return upstream_of(DELIVERABLE, *(f"corpus_{stage}" for stage in config["stages"]), graph=edges(config))


def test_results_readme_lists_every_directory_the_workflow_writes():
    rows = [line for line in (REPO / "results" / "README.md").read_text().splitlines() if line.startswith("| `")]
    listed, built = {}, built_jobs()
    for row in rows:
        directories, jobs = (re.findall(r"`([^`]+)`", cell) for cell in row.split("|")[1:3])
        if jobs[0].endswith("<stage>"):  # one row for a kind of job every stage has (whose job exists)
            named = [(jobs[0].replace("<stage>", stage.name), stage.name) for stage in DEFAULT_GRAPH.stages]
            jobs = [job for job, _ in named if job in built]
            directories = [directories[0].replace("<stage>", name) for job, name in named if job in built]
        assert [f"{DEFAULT_GRAPH.directories[job]}/" for job in jobs] == directories, row
        listed.update(dict.fromkeys(jobs))
    assert set(listed) == built


def mermaid_lines(text: str) -> list[str]:
    """The lines of the one Mermaid block in TEXT, its `flowchart` line first."""
    block = re.search(r"```mermaid\n(.*?)```", text, re.DOTALL)
    assert block, "README.md has no Mermaid graph"
    return block.group(1).splitlines()


def drawn_edges(lines: list[str]) -> set[tuple[str, str]]:
    """The edges of a Mermaid flowchart's LINES: `a --> b & c --> d` chains, `&` groups."""
    edges = set()
    for line in lines[1:]:
        groups = [[name.strip() for name in part.split("&")] for part in line.split("-->")]
        for sources, targets in zip(groups, groups[1:], strict=False):
            edges |= {(source, target) for source in sources for target in targets}
    return edges


def test_the_readme_graph_draws_exactly_the_jobs_inputs():
    """The graph of the stages it draws (a stage of one's own added to config.yaml is not drawn)."""
    lines = mermaid_lines((REPO / "README.md").read_text())
    drawn = drawn_edges(lines)
    config = default_config()
    nodes = {name for edge in drawn for name in edge}
    config["stages"] = [stage for stage in config["stages"] if f"train_{stage}" in nodes]
    graph = edges(config)
    assert drawn == {(source, job) for job in built_jobs(config) for source in graph[job]}
    assert len(lines) <= 15  # a short graph; `snakemake --rulegraph mermaid-js` prints the whole one


def speed_table(path: Path) -> list[str]:
    """The rows of a page's per-CPU speed table, from its header to the first line that is no row."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("| CPU (model, flags) |"))
    return list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))


def test_the_speed_table_is_one_table_on_both_pages_with_one_row_per_cpu():
    table = speed_table(REPO / "docs" / "results.md")
    assert speed_table(REPO / "benchmarks" / "README.md") == table
    cpus = [row.split("|")[1].strip() for row in table[3:]]  # after the header, its rule and the goals
    assert cpus and len(cpus) == len(set(cpus)), cpus
