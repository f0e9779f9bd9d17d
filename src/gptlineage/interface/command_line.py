"""Rebuild an artifact's gptlineage command line from its manifest, never passing a recorded word on.

`lineage reproduce` reruns the result and the RO-Crate's `lineage-commands.sh` prints it. Example:

    words = rebuilt_command(manifest, Path("results/data_csv"), output=Path("/tmp/x/rerun"))
    # ['gptlineage', 'data-csv', '--csv=/abs/results/small_data/small_regression.csv',
    #  '--steps=5', '--output=/tmp/x/rerun']

The recorded argv is data that neither the artifact id nor a pinned content hash covers. It is
parsed with the recorded command's own parser (the parser the command ran with: an abbreviation
such as `--o` means what it meant then) and the command line is written anew from the parsed
values: each flag spelled out in full as `--flag=value`, defaults left out. Every path is
rebuilt: the artifact's own output is the given one (reproduce: a temporary directory; the
crate: the artifact's place relative to the directory it ran in), the side outputs the
command declares (`command.declaration.side_outputs` in the manifest; a manifest written before
declarations: the command module's `DECLARATION` now) are left out (copies it writes outside its
artifact) or moved into `scratch` (work folders; left out without one), and every other path
must name one of the artifact's recorded inputs (or a folder holding one), else it is refused.
The exception: `gptlineage record`'s words after `--`, passed on once each is the id-covered one.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError
from gptlineage.interface import registry
from gptlineage.interface.parser import build_parser
from gptlineage.lineage.declaration import DROP, SCRATCH, Declaration, declaration_of, declared_by
from gptlineage.lineage.identity import code_closure
from gptlineage.lineage.locations import staged_path
from gptlineage.lineage.table import flatten
from gptlineage.lineage.tree import lexical
from gptlineage.lineage.walk import input_path

OUTPUT = "output"
# Text flags that hold paths: "path" (a file or folder), "role=path", or "path-or-name" (a local
# folder when it exists where the command ran, else a dataset name on the Hugging Face hub).
PATH_TEXT = {"input": "path", "part": "role=path", "hf_dataset": "path-or-name"}
SKIPPED = (argparse._HelpAction, argparse._VersionAction)


def checked_argv(manifest: Mapping[str, Any], known: Sequence[str]) -> list[str]:
    """The recorded argv when it is a gptlineage command line of the manifest's command, else one error;
    a store's file (`s3://...`) named where the job read it, its local copy (`lineage.locations`)."""
    argv, command = manifest["command"]["argv"], manifest["command"]["name"]
    words = isinstance(argv, list) and len(argv) >= 2 and all(isinstance(w, str) and "\0" not in w for w in argv)
    if not words or argv[0] != "gptlineage":
        raise GptlineageError(f"recorded argv {str(argv)[:80]} is not a gptlineage command line; refusing to run it")
    name = argv[1]
    if name not in known:
        raise GptlineageError(f"recorded command {name!r} is not a gptlineage command; refusing to run it")
    if name != command and not (name == "lineage" and len(argv) > 2 and command == f"lineage-{argv[2]}"):
        raise GptlineageError(
            f"recorded argv runs {name!r} but the manifest's command is {command!r}; refusing to run it"
        )
    return [staged_path(word) for word in argv]


def parse_recorded(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The command's own parser and the values it reads from ARGV (its errors become one line)."""
    parser = build_parser(argv[1])
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
            values = parser.parse_args(list(argv[1:]))
    except SystemExit:
        last = (said.getvalue().strip().splitlines() or ["asks for help"])[-1]
        raise GptlineageError(f"recorded argv does not parse ({last[:160]}); refusing to run it") from None
    return parser, values


def chosen_actions(parser: argparse.ArgumentParser, values: argparse.Namespace) -> Iterator[argparse.Action | str]:
    """The parser's actions in order, each chosen subcommand as its name followed by its own actions."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(values, action.dest, None)
            if name is None or name not in action.choices:
                raise GptlineageError("recorded argv names no subcommand; refusing to run it")
            yield name
            yield from chosen_actions(action.choices[name], values)
        elif not isinstance(action, SKIPPED):
            yield action


def is_path_action(action: argparse.Action) -> bool:
    return action.type is Path or action.dest in PATH_TEXT or action.dest == OUTPUT


class Rebuild:
    """The paths of one rebuild: where the command ran, what it read, where the rerun writes.

    Each input's place as the command named it is its path relative to the recorded --output
    (`results/data_csv` + `../small_data/x.csv` = `results/small_data/x.csv`), so a recorded path
    is matched with the inputs by that reconstruction, not by text: a renamed copy, a moved tree
    or a tree a storage plugin staged elsewhere maps each recorded path to where its input lies here.
    """

    def __init__(
        self,
        artifact_dir: Path,
        manifest: Mapping[str, Any],
        output: Path | None,
        scratch: Path | None,
        places: Sequence[Path | None] | None = None,
    ):
        self.artifact_dir = lexical(artifact_dir)
        self.declared = Declaration()
        self.cwd: Path | None = None
        if places is None:
            places = [input_path(self.artifact_dir, entry) for entry in manifest["inputs"]]
        self.inputs: list[Path | None] = [None if place is None else lexical(place) for place in places]
        self.named: list[Path] = []  # each input's place as the recorded command line named it
        self.recorded_output: str | None = None
        self.output, self.scratch = output, scratch
        self.ran_in = self.artifact_dir.parent
        self.links: dict[Path, Path] = {}  # a path in the rerun's folder -> where it leads here

    def recorded_from(self, recorded_output: Any, entries: Sequence[Mapping[str, Any]]) -> None:
        """Each input's place as named where the command ran, from the recorded --output."""
        if isinstance(recorded_output, (str, Path)) and str(recorded_output):
            self.recorded_output = str(recorded_output)
            self.named = [Path(os.path.normpath(os.path.join(recorded_output, e["path"]))) for e in entries]

    def here(self, text: str) -> Path | None:
        """Where the recorded path TEXT (an input, or a folder holding one) lies here, else None."""
        given = Path(os.path.normpath(text))
        for named, actual in zip(self.named, self.inputs, strict=False):
            if actual is None:
                continue
            if given == named:
                return actual
            depth = len(named.parts) - len(given.parts)
            if given.parts and depth > 0 and given in named.parents and actual.parts[-depth:] == named.parts[-depth:]:
                return Path(*actual.parts[:-depth])
        where = lexical(self.ran_in / text)
        return where if self.is_input(where) else None

    def located(self, text: str) -> str:
        """A recorded input path as the rebuilt command names it: as it ran (a script), or for a rerun
        the same relative path through a link in the rerun's folder (outputs that print the path
        come out the same), else absolute."""
        where = self.here(text)
        if where is None:
            raise GptlineageError(f"recorded path {text!r} is not one of the artifact's inputs; refusing to use it")
        if self.output is None:
            return os.path.relpath(where, self.ran_in)
        return self.linked(text, where)

    def linked(self, text: str, where: Path, inside: bool = False) -> str:
        """TEXT (relative, naming WHERE) through a link in the rerun's folder: the part of TEXT before
        the longest tail it shares with WHERE leads to WHERE's part before it. Absolute when a link
        already made leads elsewhere."""
        given = Path(os.path.normpath(text))
        if self.cwd is None or given.is_absolute() or not given.parts or ".." in given.parts:
            return str(where)
        shared = 0
        while shared < len(given.parts) - 1 and given.parts[-1 - shared] == where.parts[-1 - shared]:
            shared += 1
        if inside and not shared:  # the rerun writes inside a linked folder, never onto a link
            return str(where)
        name = Path(*given.parts[: len(given.parts) - shared])
        target = Path(*where.parts[: len(where.parts) - shared])
        for made, leads in self.links.items():
            if (made == name and leads != target) or (made != name and (made in name.parents or name in made.parents)):
                return str(where)
        self.links[name] = target
        return text

    def make_links(self) -> None:
        for name, target in self.links.items():
            link = self.cwd / name  # type: ignore[operator]  (links are made only with a cwd)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)

    def output_value(self) -> str:
        """The artifact's --output: as it ran (a script), or the rerun's folder (a sibling of the
        artifact) named like the recorded one, through a link to the folder holding it (a path an
        output records relative to its own folder, select-best's `../train/checkpoints/...`, then
        comes out the same); absolute when no such link can be made."""
        if self.output is None:
            return os.path.relpath(self.artifact_dir, self.ran_in)
        recorded = Path(os.path.normpath(self.recorded_output or "/"))
        if recorded.is_absolute() or len(recorded.parts) < 2 or self.output.parent != self.artifact_dir.parent:
            return str(self.output)
        return self.linked(str(recorded.parent / self.output.name), self.output, inside=True)

    def is_input(self, where: Path) -> bool:
        return any(path is not None and (where == path or where in path.parents) for path in self.inputs)

    def path_value(self, action: argparse.Action, text: str) -> str | None:
        """The rebuilt value of a path flag, or None to leave the flag out."""
        if action.dest == OUTPUT:
            return self.output_value()
        side_output = self.declared.side_output(action.option_strings)
        if side_output == DROP:
            return None
        if side_output == SCRATCH:
            return None if self.scratch is None else str(self.scratch / action.dest)
        kind = PATH_TEXT.get(action.dest, "path")
        if kind == "role=path":
            role, equals, path = text.partition("=")
            return f"{role}={self.located(path)}" if equals else self.located(text)
        if kind == "path-or-name" and not (self.ran_in / text).exists():
            return text
        return self.located(text)


def value_text(action: argparse.Action, value: Any) -> str:
    """One parsed value as the text the command's parser reads back to the same value."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Path)):
        raise GptlineageError(f"recorded {action.option_strings or action.dest}: cannot rebuild {value!r}")
    return repr(value) if isinstance(value, float) else str(value)


def option_words(action: argparse.Action, value: Any, paths: Rebuild) -> list[str]:
    """The words of one flag for its parsed VALUE (none when it is the default)."""
    flag = max(action.option_strings, key=len) if action.option_strings else None
    if isinstance(action, argparse.BooleanOptionalAction):
        if value == action.default:
            return []
        return [next(o for o in action.option_strings if o.startswith("--no-") == (not value))]
    if isinstance(action, (argparse._StoreConstAction, argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return [flag] if value == action.const and value != action.default else []
    if not isinstance(action, (argparse._StoreAction, argparse._AppendAction)):
        if value == action.default:
            return []
        raise GptlineageError(f"recorded {flag or action.dest}: a kind of flag that cannot be rebuilt")
    if value is None or (value == action.default and not action.required and not is_path_action(action)):
        return []
    items = value if isinstance(value, list) else [value]
    texts = [value_text(action, item) for item in items]
    if is_path_action(action):
        texts = [text for text in (paths.path_value(action, text) for text in texts) if text is not None]
    if flag is None and not is_path_action(action) and isinstance(value, list):  # words of a command (record's)
        return ["--", *texts]  # after `--`, as recorded: the command the artifact ran
    if flag is None:  # a positional: a path of ours never starts with "-"
        return [text if not text.startswith("-") else f"./{text}" for text in texts]
    return [f"{flag}={text}" for text in texts]


def rebuilt_command(
    manifest: Mapping[str, Any],
    artifact_dir: Path,
    *,
    output: Path | None = None,
    scratch: Path | None = None,
    cwd: Path | None = None,
    places: Sequence[Path | None] | None = None,
) -> list[str]:
    """`gptlineage <command> <flags>` rebuilt from the manifest (see the module's docstring).

    OUTPUT None: the command as it ran, paths relative to the directory it ran in (for a script).
    CWD: the rerun's empty folder, where a link per relative input path's first part is made.
    PLACES: where each recorded input lies here (default: its recorded place; `lineage.reproduce`
    gives the plain sources verify found, at their place or in --sources).
    """
    argv = checked_argv(manifest, registry.command_names())
    parser, values = parse_recorded(argv)
    steps = list(chosen_actions(parser, values))
    if output is not None:  # a rerun: a forged value is refused before it runs for hours
        check_against_parameters(steps, values, manifest.get("parameters", {}))
    paths = Rebuild(artifact_dir, manifest, output, scratch, places)
    paths.cwd = cwd
    recorded = "declaration" in manifest["command"]  # else written before declarations: the code's now
    paths.declared = declaration_of(manifest) if recorded else declared_by(registry.command(argv[1]).module)
    if recorded:
        check_declaration(manifest)

    def rebuilt(action: argparse.Action) -> list[str]:
        return option_words(action, getattr(values, action.dest, None), paths)

    paths.recorded_from(getattr(values, OUTPUT, None), manifest["inputs"])
    paths.ran_in = ran_in(paths, getattr(values, OUTPUT, None), recorded_paths(steps, values))
    if output is not None:
        check_words(steps, values, manifest, paths)
    # The output last: it is named through the links the inputs made.
    pieces = [step if isinstance(step, str) or step.dest == OUTPUT else rebuilt(step) for step in steps]
    words = ["gptlineage"]
    for piece in pieces:
        words += [piece] if isinstance(piece, str) else rebuilt(piece) if isinstance(piece, argparse.Action) else piece
    paths.make_links()
    return words


def recorded_paths(steps: Sequence[argparse.Action | str], values: argparse.Namespace) -> list[str]:
    """The relative paths the recorded command line names (input flags and positionals)."""
    found = []
    for step in steps:
        if isinstance(step, str) or not is_path_action(step) or step.dest == OUTPUT:
            continue
        value = getattr(values, step.dest, None)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (str, Path)):
                text = str(item).partition("=")[2] if PATH_TEXT.get(step.dest) == "role=path" else str(item)
                if text and not Path(text).is_absolute():
                    found.append(text)
    return found


def ran_in(paths: Rebuild, recorded_output: Any, relative: Sequence[str]) -> Path:
    """The directory the command ran in: the artifact's path less the recorded relative --output,
    else the directory that makes a relative path of the command line name one of the inputs."""
    artifact_dir = paths.artifact_dir
    output = Path(os.path.normpath(str(recorded_output))) if recorded_output is not None else None
    if (
        output is not None
        and not output.is_absolute()
        and ".." not in output.parts
        and artifact_dir.parts[-len(output.parts) :] == output.parts
    ):
        return Path(*artifact_dir.parts[: -len(output.parts)])
    for text in relative:
        given = Path(os.path.normpath(text))
        if ".." in given.parts:
            continue
        for location in (place for place in paths.inputs if place is not None):
            for candidate in (location, *location.parents):
                if len(candidate.parts) > len(given.parts) and candidate.parts[-len(given.parts) :] == given.parts:
                    return Path(*candidate.parts[: -len(given.parts)])
    return artifact_dir.parent


def check_against_parameters(
    steps: Sequence[argparse.Action | str], values: argparse.Namespace, parameters: Mapping[str, Any]
) -> None:
    """Refuse a recorded argv whose value for a setting differs from the parameters the id covers.

    A setting is matched by name with the parameters' leaves (`steps` is `steps` or `settings.steps`);
    paths and settings the parameters do not hold are left to the comparison after the rerun."""
    recorded: dict[str, list[Any]] = {}
    for key, value in flatten(parameters).items():
        recorded.setdefault(key.rsplit(".", 1)[-1], []).append(value)
    for step in steps:
        if isinstance(step, str) or is_path_action(step) or step.dest not in recorded:
            continue
        given = getattr(values, step.dest, None)
        if given is None or isinstance(given, Path) or any(same_value(given, r) for r in recorded[step.dest]):
            continue
        shown = ", ".join(repr(r) for r in recorded[step.dest])
        raise GptlineageError(
            f"recorded argv gives {step.dest}={given!r} but the recorded parameters say {shown}; refusing to run it"
        )


def check_words(steps: Sequence[argparse.Action | str], values: argparse.Namespace, manifest, paths: Rebuild) -> None:
    """Refuse a command's words (record's, after --) but the id-covered ones (a role: where its input lay)."""
    entries = {entry["role"]: entry for entry in manifest["inputs"]}
    recorded = manifest.get("parameters", {}).get("command")
    for step in steps:
        given = None if isinstance(step, str) else getattr(values, step.dest, None)
        if isinstance(step, str) or step.option_strings or is_path_action(step) or not isinstance(given, list):
            continue
        same = isinstance(recorded, list) and len(recorded) == len(given)
        if not (same and all(same_word(word, text, entries, paths) for word, text in zip(recorded, given))):
            raise GptlineageError("recorded argv's command is not the one its parameters hold; refusing to run it")


def same_word(recorded: Any, given: str, entries: Mapping[str, Any], paths: Rebuild) -> bool:
    """GIVEN (a word of the recorded argv) is RECORDED, or the place of the input RECORDED names."""
    for role, entry in entries.items():
        for head, base in ((f"input:{role}", entry.get("path")), (f"artifact-of:{role}", entry.get("artifact_path"))):
            if isinstance(recorded, str) and base and (recorded == head or recorded.startswith(head + "/")):
                place = paths.ran_in / entry["workdir_path"] if "workdir_path" in entry else paths.artifact_dir / base
                return os.path.normpath(paths.ran_in / given) == os.path.normpath(str(place) + recorded[len(head) :])
    return recorded == given


def same_value(given: Any, recorded: Any) -> bool:
    """A parsed flag value and a recorded parameter are the same setting (1 == 1.0; a list is its items)."""
    if isinstance(given, (list, tuple)) and isinstance(recorded, (list, tuple)):
        return len(given) == len(recorded) and all(same_value(a, b) for a, b in zip(given, recorded, strict=True))
    if isinstance(given, (int, float)) and isinstance(recorded, (int, float)) and not isinstance(given, bool):
        return float(given) == float(recorded)
    return given == recorded or str(given) == str(recorded)


def check_declaration(manifest: Mapping[str, Any]) -> None:
    """Refuse a recorded declaration that the recorded code does not declare (a forged one would
    let a side output through as an input path, or call results timings). Its metrics play no
    part in a rebuild, and a run may declare its own (record's, from its metrics.json)."""
    module = manifest["code"]["module"]
    try:
        same_code = code_closure(module)["closure_sha256"] == manifest["code"]["closure_sha256"]
    except ValueError:  # a module the package no longer has: reproduce says so itself
        return
    if same_code and rebuild_facts(declaration_of(manifest)) != rebuild_facts(declared_by(module)):
        raise GptlineageError(
            "the recorded command.declaration is not what the code of its closure declares; refusing to rebuild under it"
        )


def rebuild_facts(declaration: Declaration) -> dict[str, Any]:
    return {key: value for key, value in declaration.as_json().items() if key != "metrics"}
