"""Show, verify, export or report the lineage of an artifact.

Example:
    gptlineage lineage verify results/data_csv
    gptlineage lineage verify results/data_csv --expect-id <the 64-hex id you pinned>
    gptlineage lineage verify /elsewhere/results/sft_stage2 --sources data    # a copied tree, its sources here
    gptlineage lineage export results/sft_stage2 --format ro-crate --output results/sft_stage2.crate [--no-sources]
    gptlineage lineage report results/sft_stage2 --output results/lineage_report
    gptlineage lineage compare before/sft_stage2 results/sft_stage2 --output results/compare
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.lineage.artifact import content_sha256
from gptlineage.lineage.checks import is_hex64, printable
from gptlineage.lineage.sources import NOT_HERE
from gptlineage.lineage.walk import prov_document, show_lines, verify, write_prov_json
from gptlineage.settings import add_output_flag

EXAMPLE = "gptlineage lineage show results/data_csv"
FORMATS = ["prov-json", "ro-crate"]
PROV_START = b'{\n  "prefix": {'  # how every PROV-JSON file we write begins (json.dump, indent 2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    add_iteration_actions(actions)  # diff, table, reproduce (below), each with its own handler
    show = actions.add_parser("show", help="print the provenance tree from PATH back to its sources")
    show.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    check = actions.add_parser("verify", help="rehash PATH and everything upstream; exit 0 only if every byte matches")
    check.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    check.add_argument(
        "--expect-id",
        type=artifact_id_flag,
        metavar="ID",
        help="fail unless PATH's artifact has this id (64 hex digits): a pinned id notices a chain re-hashed by hand",
    )
    check.add_argument(
        "--expect-content",
        type=artifact_id_flag,
        metavar="SHA256",
        help="fail unless PATH's artifact holds exactly the files this content_sha256 (64 hex digits) names",
    )
    check.add_argument(
        "--sources",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="look here, by content, for source files a copied or moved tree no longer finds where they "
        "were recorded (repeatable)",
    )
    export = actions.add_parser("export", help="write the lineage in a standard format")
    export.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    export.add_argument(
        "--format",
        choices=FORMATS,
        default="prov-json",
        help="prov-json (W3C PROV-JSON, one file) or ro-crate (a Workflow Run RO-Crate directory)",
    )
    export.add_argument(
        "--output",
        type=Path,
        help="file (prov-json; default standard output) or directory (ro-crate, required) to write",
    )
    export.add_argument(
        "--no-sources",
        action="store_true",
        help="ro-crate: leave the source inputs (files outside the results tree) out; the crate names them by sha256",
    )
    export.add_argument(
        "--zip",
        action="store_true",
        help="ro-crate: write the crate as one zip file at --output (FILE.zip), to hand over",
    )
    report = actions.add_parser("report", help="write one self-contained HTML page of PATH and everything upstream")
    report.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    add_output_flag(report, "holds index.html")


def artifact_id_flag(text: str) -> str:
    if not is_hex64(text):
        raise argparse.ArgumentTypeError(f"{printable(text)!r} is not an artifact id (64 lowercase hex digits)")
    return text


def run(args: argparse.Namespace) -> int:
    try:
        return run_action(args)
    except GptlineageError as error:  # names from manifests and disks: no control character reaches the terminal
        raise GptlineageError(printable(error)) from None


def verify_action(args: argparse.Namespace) -> int:
    """`lineage verify`: every problem on its own line, a source absent here told apart from a change."""
    for directory in args.sources:
        if not directory.is_dir():
            raise GptlineageError(f"--sources {directory}: no such directory")
    nodes, problems = verify(args.path, args.expect_id, args.expect_content, args.sources)
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


def run_action(args: argparse.Namespace) -> int:
    if args.action == "show":
        print("\n".join(show_lines(args.path)))
        return 0
    if args.action == "verify":
        return verify_action(args)
    if args.action == "report":
        from gptlineage.reporting.page import write_report  # matplotlib loads only for the report

        print(printable(f"wrote {write_report(args.path, args.output)}"))
        return 0
    for flag, given in (("--no-sources", args.no_sources), ("--zip", args.zip)):
        if given and args.format != "ro-crate":
            raise GptlineageError(f"{flag} applies to --format ro-crate only")
    if args.format == "ro-crate":
        if args.output is None:
            raise GptlineageError("--format ro-crate needs --output DIR (the crate is a directory)")
        from gptlineage.command_line import rebuilt_command
        from gptlineage.lineage.rocrate import export_ro_crate

        def command_line(node):  # as it ran: paths relative to the directory it ran in
            return rebuilt_command(node.manifest, node.path)

        def export(folder):
            return export_ro_crate(args.path, folder, command_line, sources=not args.no_sources)

        if args.zip:
            from gptlineage.lineage.crate_place import zip_crate

            if args.output.suffix != ".zip":
                raise GptlineageError(f"--zip: --output {args.output} must name a .zip file")
            print(printable(f"wrote {zip_crate(args.output.absolute(), export)}"))
        else:
            print(printable(f"wrote {export(args.output)}"))
        return 0
    if args.output is None:
        json.dump(prov_document(args.path), sys.stdout, indent=2)
        print()
    else:
        clean_stale_json(args.output)
        print(printable(f"wrote {write_prov_json(args.path, args.output)}"))
    return 0


def clean_stale_json(output: Path) -> None:
    """Remove `.<name>.tmp-<pid>` files beside OUTPUT that killed exports left: regular files of
    this user, named so, whose process is gone and whose bytes begin as a PROV-JSON document does."""
    import os
    import re

    from gptlineage.lineage.outputs import process_gone

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
def add_format_flags(parser: argparse.ArgumentParser, forms: tuple[str, ...]) -> None:
    group = parser.add_mutually_exclusive_group()
    for form in forms:
        group.add_argument(f"--{form}", dest="form", action="store_const", const=form, help=f"print {form.upper()}")
    parser.set_defaults(form="text")


def add_iteration_actions(actions: argparse._SubParsersAction) -> None:
    diff = actions.add_parser("diff", help="compare two artifacts' lineages stage by stage: what differs and why")
    diff.add_argument("a", type=Path, help="an artifact (A, typically before a change)")
    diff.add_argument("b", type=Path, help="the same stage in another run (B)")
    diff.add_argument("--all", action="store_true", help="every stage and every metric, not only what differs")
    add_format_flags(diff, ("json", "md"))
    table = actions.add_parser(
        "table", help="one row per run (results tree or deliverable): the parameters that differ, headline metrics"
    )
    table.add_argument(
        "roots", type=Path, nargs="*", default=[Path("results")], help="results trees or artifacts (default results)"
    )
    table.add_argument("--stage", help="one row per artifact in directories of this name instead (id, metrics, date)")
    table.add_argument("--params", default="", help="comma-separated parameters to show as well (dotted or last part)")
    table.add_argument("--only-changed", action="store_true", help="only the columns whose values differ between rows")
    table.add_argument("--sort", metavar="COLUMN", help="sort by this column, named as in --csv (empty cells last)")
    table.add_argument("--descending", action="store_true", help="sort --sort's column from largest to smallest")
    add_format_flags(table, ("csv", "md", "json"))
    compare = actions.add_parser("compare", help="write one HTML page comparing runs: what differs, metrics, curves")
    compare.add_argument(
        "runs", type=Path, nargs="+", metavar="RUN", help="artifacts to compare (A B [C ...]), A first"
    )
    add_output_flag(compare, "holds index.html")
    again = actions.add_parser("reproduce", help="rerun an artifact's recorded command and compare every output file")
    again.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    again.add_argument("--tolerance", type=float, default=0.0, help="accept numbers that differ by at most this much")
    again.add_argument(
        "--with-current-code", action="store_true", help="run even when the command's code changed; list the changes"
    )
    add_format_flags(again, ("json",))
    for parser in (diff, table, compare, again):
        parser.set_defaults(command_handler=run_iteration)  # overrides the `lineage` parser's run


def run_iteration(args: argparse.Namespace) -> int:
    if args.action == "diff":
        from gptlineage.lineage.diff import diff, render_diff

        print(render_diff(diff(args.a, args.b), args.form, everything=args.all))
        return 0
    if args.action == "table":
        return print_table(args)
    if args.action == "compare":
        from gptlineage.reporting.compare_page import write_compare  # matplotlib loads only for the page

        print(printable(f"wrote {write_compare(args.runs, args.output)}"))
        return 0
    if not args.tolerance >= 0:
        raise GptlineageError(f"--tolerance {args.tolerance}: must be a number >= 0")
    from gptlineage.command_line import rebuilt_command
    from gptlineage.lineage.reproduce import render_reproduce, reproduce

    def rerun_words(manifest, artifact_dir, output, scratch, cwd):  # every output in a temporary folder
        return rebuilt_command(manifest, artifact_dir, output=output, scratch=scratch, cwd=cwd)

    report = reproduce(args.path, rerun_words, tolerance=args.tolerance, with_current_code=args.with_current_code)
    print(render_reproduce(report, args.form))
    return 0 if report["reproduced"] else 1


def print_table(args: argparse.Namespace) -> int:
    from gptlineage.lineage.runs import run_headers, run_table
    from gptlineage.lineage.table import artifact_table, render

    params = [name.strip() for name in args.params.split(",") if name.strip()]
    sort = f"-{args.sort}" if args.sort and args.descending else args.sort
    options = {"params": params, "sort": sort, "only_changed": args.only_changed}
    if args.stage is not None:
        print(render(artifact_table(args.roots, stage=args.stage, **options), args.form))
        return 0
    table = run_table(args.roots, **options)
    print(render(table, args.form, headers=run_headers(table)))
    return 0
