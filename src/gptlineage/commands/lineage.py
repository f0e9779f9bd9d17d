"""Show, verify or export the lineage of an artifact.

Example:
    gptlineage lineage verify results/data_csv
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gptlineage.artifact import write_json_atomic
from gptlineage.lineage import prov_document, show_lines, verify

NAME = "lineage"
EXAMPLE = "gptlineage lineage show results/data_csv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=type(parser))
    show = actions.add_parser("show", help="print the provenance tree from PATH back to its sources")
    show.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    check = actions.add_parser("verify", help="rehash PATH and everything upstream; exit 0 only if every byte matches")
    check.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    export = actions.add_parser("export", help="write the lineage in a standard format")
    export.add_argument("path", type=Path, help="an artifact directory, or a file inside one")
    export.add_argument("--format", choices=["prov-json"], default="prov-json", help="output format (default prov-json)")
    export.add_argument("--output", type=Path, help="file to write (default: standard output)")


def run(args: argparse.Namespace) -> int:
    if args.action == "show":
        print("\n".join(show_lines(args.path)))
        return 0
    if args.action == "verify":
        nodes, problems = verify(args.path)
        for problem in problems:
            print(f"FAILED {problem}")
        files = sum(len(node.manifest["files"]) for node in nodes)
        verdict = "FAILED" if problems else "OK"
        print(f"{verdict}: {len(nodes)} artifacts, {files} files checked, {len(problems)} problems")
        return 1 if problems else 0
    document = prov_document(args.path)
    if args.output is None:
        json.dump(document, sys.stdout, indent=2)
        print()
    else:
        write_json_atomic(args.output, document)
        print(f"wrote {args.output}")
    return 0
