"""Show, verify, export or compare the lineage of an artifact.

Example:
    gptlineage lineage verify results/data_csv
    gptlineage lineage verify results/data_csv --expect-id <the 64-hex id you pinned>
    gptlineage lineage verify /elsewhere/results/sft_stage2 --sources data    # a copied tree, its sources here
    gptlineage lineage export results/sft_stage2 --format ro-crate --output results/sft_stage2.crate [--no-sources]
    gptlineage lineage export mlflow results --tracking-uri file:mlruns    # one MLflow run per artifact
    gptlineage lineage compare before/sft_stage2 results/sft_stage2 --output results/compare
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from pathlib import Path

from gptlineage.core.errors import GptlineageError, printable
from gptlineage.core.settings import add_flags, from_args
from gptlineage.interface.registry import Command
from gptlineage.lineage.action_settings import (
    CompareSettings,
    DiffSettings,
    ExportSettings,
    ReproduceSettings,
    ShowSettings,
    TableSettings,
    VerifySettings,
    check_source_directories,
)
from gptlineage.lineage.artifact import content_sha256
from gptlineage.lineage.outputs import process_gone
from gptlineage.lineage.prov import prov_document, write_prov_json
from gptlineage.lineage.sources import NOT_HERE
from gptlineage.lineage.walk import show_lines, verify

COMMAND = Command(
    "lineage",
    "show, verify, export or compare the lineage of an artifact",
    None,
    None,
)
EXAMPLE = "gptlineage lineage show results/data_csv"
PROV_START = b'{\n  "prefix": {'  # how every PROV-JSON file we write begins (json.dump, indent 2)


# Each action: its settings class (gptlineage.lineage.action_settings: its flags) and its help line;
# HANDLERS (below) runs it.
ACTIONS = {
    "show": (ShowSettings, "print the provenance tree from PATH back to its sources"),
    "verify": (VerifySettings, "rehash PATH and everything upstream; exit 0 only if every byte matches"),
    "export": (ExportSettings, "write the lineage in a standard format"),
    "diff": (DiffSettings, "compare two artifacts' lineages stage by stage: what differs and why"),
    "table": (
        TableSettings,
        "one row per run (results tree or deliverable): the parameters that differ, headline metrics",
    ),
    "compare": (CompareSettings, "write one HTML page comparing runs: what differs, metrics, curves"),
    "reproduce": (ReproduceSettings, "rerun an artifact's recorded command and compare every output file"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    for name, (settings, help_text) in ACTIONS.items():
        add_flags(actions.add_parser(name, help=help_text), settings)


def run(args: argparse.Namespace) -> int:
    try:
        settings = from_args(ACTIONS[args.action][0], args)
        if isinstance(settings, (VerifySettings, ReproduceSettings)):
            check_source_directories(settings.sources)
        return HANDLERS[args.action](settings)
    except GptlineageError as error:  # names from manifests and disks: no control character reaches the terminal
        raise GptlineageError(printable(error)) from None


def show_action(settings: ShowSettings) -> int:
    from gptlineage.lineage.show_text import compact_lines

    print("\n".join(show_lines(settings.path) if settings.full else compact_lines(settings.path)))
    return 0


def verify_action(settings: VerifySettings) -> int:
    """`lineage verify`: every problem on its own line, a source absent here told apart from a change."""
    nodes, problems = verify(settings.path, settings.expect_id, settings.expect_content, list(settings.sources))
    absent = [problem for problem in problems if NOT_HERE in problem]
    for problem in problems:
        print(printable(f"{'ABSENT' if problem in absent else 'FAILED'} {problem}"))
    files = sum(len(node.manifest["files"]) for node in nodes)
    counts = (
        f"{len(nodes)} artifacts, {files} files checked, {len(problems)} problem{'' if len(problems) == 1 else 's'}"
    )
    if absent:
        counts += f" ({len(absent)} source{'' if len(absent) == 1 else 's'} not found here: pass --sources DIR)"
    if problems:
        sys.stdout.flush()
        raise GptlineageError(f"{nodes[0].path}: verify FAILED: {counts}")
    top = nodes[0].manifest
    print(f"OK: {counts} (id {top['id']}, content_sha256 {content_sha256(top)})")
    return 0


def export_action(settings: ExportSettings) -> int:
    if settings.mlflow_tree is not None:
        return export_to_mlflow(settings)
    if settings.format == "ro-crate":
        return export_crate(settings)
    if settings.output is None:
        json.dump(prov_document(settings.path), sys.stdout, indent=2)
        print()
    else:
        clean_stale_json(settings.output)
        print(printable(f"wrote {write_prov_json(settings.path, settings.output)}"))
    return 0


def export_to_mlflow(settings: ExportSettings) -> int:
    from gptlineage.lineage.mlflow_export import export_mlflow

    counts = export_mlflow(settings.mlflow_tree, settings.tracking_uri, settings.experiment_name)
    print(printable(f"{settings.tracking_uri}: experiment {settings.experiment_name}: {counts}"))
    return 0


def export_crate(settings: ExportSettings) -> int:
    from gptlineage.interface.command_line import rebuilt_command
    from gptlineage.lineage.rocrate import export_ro_crate

    def command_line(node):  # as it ran: paths relative to the directory it ran in
        return rebuilt_command(node.manifest, node.path)

    # --zip: verified and refused (an output inside the lineage) before its build folder exists
    written = export_ro_crate(settings.path, settings.output, command_line, settings.sources, zipped=settings.zip)
    print(printable(f"wrote {written}"))
    return 0


def clean_stale_json(output: Path) -> None:
    """Remove `.<name>.tmp-<pid>` files beside OUTPUT that killed exports left: regular files of
    this user, named so, whose process is gone and whose bytes begin as a PROV-JSON document does."""
    pattern = re.compile(rf"\.{re.escape(output.name)}\.tmp-(?P<pid>[0-9]+)")
    folder = output.absolute().parent
    for entry in sorted(folder.glob(f".{glob.escape(output.name)}.tmp-*")) if folder.is_dir() else []:
        match = pattern.fullmatch(entry.name)
        if not match or int(match["pid"]) == os.getpid() or not process_gone(int(match["pid"])):
            continue
        try:
            with open(entry, "rb") as handle:
                mine = entry.lstat().st_uid == os.getuid() and entry.is_file() and not entry.is_symlink()
                mine = mine and handle.read(len(PROV_START)) in (PROV_START, PROV_START[: entry.stat().st_size])
        except OSError:
            continue
        if mine:
            entry.unlink(missing_ok=True)


# diff, table, compare and reproduce: for comparing runs while iterating (lineage/diff.py, runs.py,
# table.py, reproduce.py; reporting/compare_page.py):
#     gptlineage lineage diff results/data_csv other/results/data_csv --md
#     gptlineage lineage table results other/results --only-changed
#     gptlineage lineage table results other/results --stage pretrain --csv
#     gptlineage lineage compare results/sft_stage2 other/results/sft_stage2 --output compare
#     gptlineage lineage reproduce results/data_csv
def diff_action(settings: DiffSettings) -> int:
    from gptlineage.lineage.diff import diff, render_diff

    print(render_diff(diff(settings.a, settings.b), settings.form, everything=settings.all))
    return 0


def compare_action(settings: CompareSettings) -> int:
    from gptlineage.reporting.compare_page import write_compare  # matplotlib loads only for the page

    print(printable(f"wrote {write_compare(list(settings.runs), settings.output)}"))
    return 0


def reproduce_action(settings: ReproduceSettings) -> int:
    from gptlineage.interface.command_line import rebuilt_command
    from gptlineage.lineage.reproduce import render_reproduce, reproduce, verdict_line

    def rerun_words(manifest, artifact_dir, output, scratch, cwd, places):  # every output in a temporary folder
        return rebuilt_command(manifest, artifact_dir, output=output, scratch=scratch, cwd=cwd, places=places)

    report = reproduce(
        settings.path,
        rerun_words,
        tolerance=settings.tolerance,
        with_current_code=settings.with_current_code,
        sources=settings.sources,
    )
    print(render_reproduce(report, settings.form))
    return 0 if verdict_line(report, "")[1] else 1


def table_action(settings: TableSettings) -> int:
    from gptlineage.lineage.runs import run_headers, run_table
    from gptlineage.lineage.table import artifact_table, choose_columns, render

    columns = [name.strip() for name in settings.columns.split(",") if name.strip()]
    params = [name.strip() for name in settings.params.split(",") if name.strip()]
    sort = f"-{settings.sort}" if settings.sort and settings.descending else settings.sort
    options = {"params": params, "sort": sort, "only_changed": settings.only_changed}
    roots = list(settings.roots)
    if settings.stage is not None:
        table = artifact_table(roots, stage=settings.stage, **options)
        print(render(choose_columns(table, columns) if columns else table, settings.form))
        return 0
    table = run_table(roots, **options)
    table = choose_columns(table, columns) if columns else table
    print(render(table, settings.form, headers=run_headers(table)))
    return 0


HANDLERS = {
    "show": show_action,
    "verify": verify_action,
    "export": export_action,
    "diff": diff_action,
    "table": table_action,
    "compare": compare_action,
    "reproduce": reproduce_action,
}
