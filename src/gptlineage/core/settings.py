"""Typed settings: each stage's configuration is one frozen dataclass, and this module turns it
into command-line flags, back into the dataclass, and checks a workflow config slice against it.

A field declared with `setting(...)` carries everything about one setting: its type (the
annotation), default, help text and range. Nothing else writes them down: `add_flags` makes
`--name` flags whose help shows the default, `from_args` builds the dataclass from parsed
flags, `from_mapping` builds it from a config slice (refusing unknown keys), and
`check_settings` (called from `__post_init__`) checks every field's type and range, and the
ranges no field declares (`implicit_range`). A field whose type is itself a settings dataclass
is a part: its fields are flags of their own, with no prefix, so a config slice stays flat
(`pretrain: {steps: 300, preset: cpu-small}`).
(gptlineage.pipeline.slices reads a Snakemake slice's strings as their settings' types first.)

Example:
    @dataclass(frozen=True)
    class ScheduleConfig:
        steps: int = setting(10, "optimizer updates", minimum=0)
        def __post_init__(self): check_settings(self)

    add_flags(parser, ScheduleConfig)          # --steps STEPS  optimizer updates (default: 10)
    config = from_args(ScheduleConfig, parser.parse_args(["--steps", "5"]))
    from_mapping(ScheduleConfig, {"steps": -1})   # SettingError: steps: must be >= 0, got -1
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import reprlib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gptlineage.core.errors import GptlineageError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what torch and NumPy integers hold
SEED_RANGE = (0, INT64_MAX)  # torch.Generator.manual_seed, NumPy and splitmix all take these


class SettingError(GptlineageError):
    """A bad setting: `name` is the field (flag `--name-with-dashes`, config key `name`)."""

    def __init__(self, name: str, detail: str, *, whole: bool = False) -> None:
        """`detail` follows the flag (`--steps must be >= 0`), or stands alone with `whole=True`."""
        super().__init__(detail if whole else f"--{name.replace('_', '-')} {detail}")
        self.name, self.detail = name, detail


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    choices: tuple | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    below: float | None = None,
    group: str | None = None,
    flag: bool = True,
    finite: bool = True,
    work: bool = True,
    unset: str | None = None,
    positional: bool = False,
    metavar: str | None = None,
    switches: bool = False,
) -> Any:
    """A dataclass field with its help text and range (`above`/`below` are strict bounds).

    `flag=False` keeps a field out of the command line (a part filled in by the command);
    `finite=False` lets a float setting be NaN or infinite; `work=False` marks a guard that cannot
    change the result (a memory limit), left out of the parameters that identify the work;
    `unset` says what a None default resolves to (`--lr`'s help: "(default: 6e-4 for gpt2-small,
    else 3e-4)"), written from the values the resolving code uses. `positional=True` makes the
    setting an argument without a flag (a tuple one takes one or more, or any number when it has a
    default); `switches=True` makes each of its `choices` but the default a flag of its own, one
    at most (`--csv`, `--md`: `help` followed by the choice, "print" -> "print CSV")."""
    metadata = {name: value for name, value in locals().items() if name != "default"}  # every keyword above
    if isinstance(default, (list, dict, set)):
        raise TypeError("mutable defaults are not settings; use a tuple")
    return dataclasses.field(default=default, metadata=metadata)


OUTPUT_HELP = "artifact directory to write"


def output_setting(holds: str = "", **options: Any) -> Any:
    """Every command's `--output`, as a settings field: the artifact directory it writes (holding `holds`)."""
    return setting(help=f"{OUTPUT_HELP} ({holds})" if holds else OUTPUT_HELP, **options)


def add_output_flag(parser: argparse.ArgumentParser, holds: str = "") -> None:
    """`--output` for a parser whose other flags are not a settings class: as `add_flags` makes it."""
    help_text = f"{OUTPUT_HELP} ({holds})" if holds else OUTPUT_HELP
    parser.add_argument("--output", type=Path, required=True, dest="output", help=f"{help_text} (required)")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """The resolved annotation of every field (modules use `from __future__ import annotations`)."""
    return typing.get_type_hints(cls)


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed): `int | None` -> (int, True)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [member for member in typing.get_args(annotation) if member is not type(None)]
        return (members[0] if len(members) == 1 else annotation), len(members) < len(typing.get_args(annotation))
    return annotation, False


def is_part(annotation: Any) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def is_sequence(annotation: Any) -> bool:
    return typing.get_origin(annotation) is tuple


def setting_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    """Every leaf setting of `cls`, parts flattened, with its resolved type (no None)."""
    found = []
    for field in dataclasses.fields(cls):
        annotation, _ = unwrap(field_types(cls)[field.name])
        if is_part(annotation):
            found.extend(setting_fields(annotation))
        else:
            found.append((field, annotation))
    return found


# ---------------------------------------------------------------- checking


# How much of a bad value an error shows: a YAML alias bomb (a list of lists of lists...,
# shared by reference) is small in memory but billions of items as text.
SHOWN = reprlib.Repr()  # Python 3.11's takes no keywords
SHOWN.maxlevel, SHOWN.maxlist, SHOWN.maxtuple, SHOWN.maxdict, SHOWN.maxset = 2, 4, 4, 4, 4
SHOWN.maxstring = SHOWN.maxother = 80


def describe(value: Any) -> str:
    """A value as an error message shows it: strings quoted, containers and long text cut short."""
    if isinstance(value, int) and value.bit_length() > 14284:  # str() refuses more than 4300 digits
        return "an integer of 4300 digits or more"
    if isinstance(value, (str, list, tuple, dict, set, frozenset, int)):
        return SHOWN.repr(value)
    return str(value)


def check_value(name: str, annotation: Any, value: Any) -> None:
    """Type check one value against its (None-free) annotation; raise SettingError if it does not fit."""
    if is_sequence(annotation):
        if not isinstance(value, tuple):
            raise SettingError(name, f"must be a list, got {describe(value)}")
        for item in value:
            check_value(name, typing.get_args(annotation)[0], item)
        return
    expected = {int: "an integer", float: "a number", bool: "true or false", str: "a string", Path: "a path"}
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
        Path: isinstance(value, (str, Path)),
    }.get(annotation, True)
    if not ok:
        raise SettingError(name, f"must be {expected[annotation]}, got {describe(value)}")


def is_seed(name: str) -> bool:
    return name == "seed" or name.endswith("_seed")


def implicit_range(field: dataclasses.Field, annotation: Any, value: Any) -> None:
    """The ranges no field declares: floats are finite, integers fit in 64 bits, seeds are >= 0."""
    item_type = typing.get_args(annotation)[0] if is_sequence(annotation) else annotation
    for item in value if isinstance(value, tuple) else (value,):
        if item_type is float and field.metadata.get("finite", True) and not math.isfinite(item):
            raise SettingError(field.name, f"must be finite, got {describe(item)}")
        if item_type is int:
            low, high = SEED_RANGE if is_seed(field.name) else (INT64_MIN, INT64_MAX)
            if not low <= item <= high:
                raise SettingError(field.name, f"must be in {low}..{high}, got {describe(item)}")


def check_range(field: dataclasses.Field, value: Any) -> None:
    meta, name = field.metadata, field.name
    values = value if isinstance(value, tuple) else (value,)
    for item in values:
        if meta.get("choices") is not None and item not in meta["choices"]:
            raise SettingError(name, f"must be one of {', '.join(map(str, meta['choices']))}, got {describe(item)}")
        bounds = (
            ("minimum", lambda v, b: v >= b, ">="),
            ("maximum", lambda v, b: v <= b, "<="),
            ("above", lambda v, b: v > b, ">"),
            ("below", lambda v, b: v < b, "<"),
        )
        for key, holds, sign in bounds:
            bound = meta.get(key)
            if bound is not None and not holds(item, bound):
                wanted = "positive" if (key, bound) == ("above", 0) else f"{sign} {bound:g}"
                raise SettingError(name, f"must be {wanted}, got {describe(item)}")


def check_settings(instance: Any) -> None:
    """Check every field of a settings dataclass: type, None only where allowed, choices, range."""
    for field in dataclasses.fields(instance):
        annotation, optional = unwrap(field_types(type(instance))[field.name])
        value = getattr(instance, field.name)
        if value is None:
            if not optional:
                raise SettingError(field.name, "is required")
            continue
        if is_part(annotation):
            continue  # a part checked itself when it was built
        check_value(field.name, annotation, value)
        implicit_range(field, annotation, value)
        check_range(field, value)


# ---------------------------------------------------------------- building from a mapping


def normalized(annotation: Any, value: Any) -> Any:
    """YAML and argparse give lists and ints where the dataclass wants tuples and floats."""
    if value is None:
        return None
    if is_sequence(annotation) and isinstance(value, list):
        return tuple(value)
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value) if value.bit_length() <= 1000 else math.inf  # past float's range: infinite
    if annotation is Path and isinstance(value, str):
        return Path(value)
    return value


def from_mapping(cls: type, values: Mapping[str, Any]) -> Any:
    """Build `cls` from flat keys (parts filled from the same keys); unknown keys are refused.

    A key set to null keeps its default, as the workflow leaves a null key's flag out (a
    profile merged over another turns a key off with null)."""
    known = {field.name for field, _ in setting_fields(cls)}
    for key in values:
        if key not in known:
            raise SettingError(str(key), "unknown setting")
    return build(cls, {key: value for key, value in values.items() if value is not None})


def build(cls: type, values: Mapping[str, Any]) -> Any:
    arguments = {}
    for field in dataclasses.fields(cls):
        annotation, _ = unwrap(field_types(cls)[field.name])
        if is_part(annotation):
            arguments[field.name] = build(annotation, values)
        elif field.name in values:
            arguments[field.name] = normalized(annotation, values[field.name])
    return cls(**arguments)


def from_args(cls: type, args: argparse.Namespace) -> Any:
    """Build `cls` from parsed flags (made by `add_flags`); a repeatable flag never given keeps its default."""
    names = {field.name for field, _ in setting_fields(cls)}
    # An optional list argument not given parses as []: its default stands.
    given = {name: value for name, value in vars(args).items() if name in names and value not in (None, [])}
    return build(cls, given)


def as_mapping(instance: Any) -> dict[str, Any]:
    """The flat JSON-ready values of a settings dataclass (parts merged, paths as strings)."""
    flat: dict[str, Any] = {}
    for field in dataclasses.fields(instance):
        value = getattr(instance, field.name)
        if dataclasses.is_dataclass(value):
            flat.update(as_mapping(value))
        elif isinstance(value, Path):
            flat[field.name] = str(value)
        elif isinstance(value, tuple):
            flat[field.name] = [str(item) if isinstance(item, Path) else item for item in value]
        else:
            flat[field.name] = value
    return flat


def work_parameters(instance: Any) -> dict[str, Any]:
    """The settings that define the work: every field but file locations (typed Path) and guards
    marked `work=False`.

    Locations are where the inputs and outputs happen to be; an artifact records its inputs
    by hash instead, so the same work has the same parameters wherever its files live."""
    left_out = {
        field.name
        for field, annotation in setting_fields(type(instance))
        if annotation is Path or not field.metadata.get("work", True)
    }
    return {name: value for name, value in as_mapping(instance).items() if name not in left_out}


# ---------------------------------------------------------------- command-line flags


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """One flag per leaf setting of `cls`; the help shows the default, groups follow `group=`."""
    groups: dict[str, Any] = {}
    for field, annotation in setting_fields(cls):
        if not field.metadata.get("flag", True):
            continue
        group_name = field.metadata.get("group")
        target = parser
        if group_name:
            target = groups.setdefault(group_name, parser.add_argument_group(group_name))
        if field.metadata.get("switches"):
            add_switches(target, field)
        elif field.metadata.get("positional"):
            target.add_argument(field.name, **positional_options(field, annotation))
        else:
            target.add_argument(f"--{field.name.replace('_', '-')}", **flag_options(field, annotation))


def add_switches(parser: Any, field: dataclasses.Field) -> None:
    """One flag per choice of FIELD but its default, each storing its choice; at most one given."""
    group = parser.add_mutually_exclusive_group()
    for choice in field.metadata["choices"]:
        if choice != field.default:
            help_text = f"{field.metadata.get('help', '')} {choice.upper()}".strip()
            group.add_argument(f"--{choice}", dest=field.name, action="store_const", const=choice, help=help_text)


def positional_options(field: dataclasses.Field, annotation: Any) -> dict[str, Any]:
    """argparse keyword arguments for a setting given without a flag."""
    meta, required = field.metadata, field.default is dataclasses.MISSING
    options: dict[str, Any] = {"help": meta.get("help", ""), "metavar": meta.get("metavar") or field.name.upper()}
    if is_sequence(annotation):
        options["type"] = typing.get_args(annotation)[0]
        options["nargs"] = "+" if required else "*"
        if not required:
            options["help"] += f" (default: {default_text(field.default)})"
        return options
    return {**options, "type": annotation}


def flag_options(field: dataclasses.Field, annotation: Any) -> dict[str, Any]:
    """argparse keyword arguments for one setting."""
    meta = field.metadata
    default = None if field.default is dataclasses.MISSING else field.default
    if field.default is dataclasses.MISSING:
        shown = "required"
    else:
        shown = f"default: {meta.get('unset') if default is None and meta.get('unset') else default_text(default)}"
    options: dict[str, Any] = {"help": f"{meta.get('help', '')} ({shown})".strip(), "dest": field.name}
    if field.default is dataclasses.MISSING:
        options["required"] = True
    if annotation is bool:
        return {**options, "action": argparse.BooleanOptionalAction, "default": default}
    if meta.get("metavar"):
        options["metavar"] = meta["metavar"]
    if is_sequence(annotation):
        item = typing.get_args(annotation)[0]
        return {**options, "action": "append", "type": item, "default": None}
    if meta.get("choices") is not None:  # checked by the dataclass, so a bad value is one line like any other
        options["metavar"] = "{" + ",".join(map(str, meta["choices"])) + "}"
    return {**options, "type": annotation, "default": default}


def default_text(default: Any) -> str:
    if default is None:
        return "unset"
    if isinstance(default, tuple):
        return " ".join(map(str, default)) or "none"
    if isinstance(default, str):
        return repr(default) if default == "" else default
    return str(default)


def setting_like(cls: type, name: str, default: Any = dataclasses.MISSING, **changes: Any) -> Any:
    """The setting `name` of `cls` declared again (help, range, group), with `default` when given
    and the keywords of `setting` in `changes` replaced (`group=`, `minimum=`).

    How a config shares another config's setting, or changes only its default, without
    writing its help and range a second time:

        class BenchSampling(SamplingConfig):
            top_k: int = setting_like(SamplingConfig, "top_k", 1)
    """
    original = cls.__dataclass_fields__[name]
    metadata = {**original.metadata, **changes}
    if default is not dataclasses.MISSING and default is not None:
        metadata["unset"] = None  # a value replaces what an unset setting resolved to
    return dataclasses.field(default=original.default if default is dataclasses.MISSING else default, metadata=metadata)
