"""Show, verify, export or report the lineage of an artifact.

Example:
    gptlineage lineage verify results/data_csv
    gptlineage lineage verify results/data_csv --expect-id <the 64-hex id you pinned>
    gptlineage lineage export results/sft_stage2 --format ro-crate --output results/sft_stage2.crate [--no-sources]
    gptlineage lineage report results/sft_stage2 --output results/lineage_report
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gptlineage.errors import GptlineageError
from gptlineage.lineage.checks import is_hex64, printable
from gptlineage.lineage.walk import prov_document, show_lines, verify, write_prov_json

NAME = "lineage"
EXAMPLE = "gptlineage lineage show results/data_csv"
FORMATS = ["prov-json", "ro-crate"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
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
    report = actions.add_parser("report", help="write one self-contained HTML page of PATH and everything upstream")
    report.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    report.add_argument("--output", type=Path, required=True, help="artifact directory to write (holds index.html)")


def artifact_id_flag(text: str) -> str:
    if not is_hex64(text):
        raise argparse.ArgumentTypeError(f"{printable(text)!r} is not an artifact id (64 lowercase hex digits)")
    return text


def run(args: argparse.Namespace) -> int:
    try:
        return run_action(args)
    except GptlineageError as error:  # names from manifests and disks: no control character reaches the terminal
        raise GptlineageError(printable(error)) from None


def run_action(args: argparse.Namespace) -> int:
    if args.action == "show":
        print("\n".join(show_lines(args.path)))
        return 0
    if args.action == "verify":
        nodes, problems = verify(args.path, args.expect_id)
        for problem in problems:
            print(printable(f"FAILED {problem}"))
        files = sum(len(node.manifest["files"]) for node in nodes)
        counts = (
            f"{len(nodes)} artifacts, {files} files checked, {len(problems)} problem{'' if len(problems) == 1 else 's'}"
        )
        if problems:
            sys.stdout.flush()
            raise GptlineageError(f"{nodes[0].path}: verify FAILED: {counts}")
        print(f"OK: {counts}")
        return 0
    if args.action == "report":
        from gptlineage.reporting.page import write_report  # matplotlib loads only for the report

        print(printable(f"wrote {write_report(args.path, args.output)}"))
        return 0
    if args.no_sources and args.format != "ro-crate":
        raise GptlineageError("--no-sources applies to --format ro-crate only")
    if args.format == "ro-crate":
        if args.output is None:
            raise GptlineageError("--format ro-crate needs --output DIR (the crate is a directory)")
        from gptlineage.lineage.rocrate import export_ro_crate

        print(printable(f"wrote {export_ro_crate(args.path, args.output, sources=not args.no_sources)}"))
        return 0
    if args.output is None:
        json.dump(prov_document(args.path), sys.stdout, indent=2)
        print()
    else:
        print(printable(f"wrote {write_prov_json(args.path, args.output)}"))
    return 0
