"""The settings of `gptlineage experiment` (`ExperimentConfig`), without the page's packages.

They live apart from `reporting.experiment`, so the workflow checks the config slice without loading it.

Example:
    ExperimentConfig(part=("model=results/train/sft_stage2",), output=Path("results/sft_stage2")).parts()
    # {'model': PosixPath('results/train/sft_stage2')}
    ExperimentConfig(part=("Model=x",), output=Path("o"))   # SettingError: --part must be ROLE=PATH with a lowercase role, ...
    ExperimentConfig(part=("model=m",), output=Path("o"), name="lr_high", override=("sft_stage2.lr=0.0004",))
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gptlineage.core.settings import SettingError, check_settings, output_setting, setting

ROLE = re.compile(r"[a-z][a-z0-9_]{0,63}")  # a part's role: it names an input in the manifest
OVERRIDE = re.compile(r"[a-z][a-z0-9_]*\.[a-z][a-z0-9_.]*=.*", re.S)  # SLICE.KEY=VALUE


@dataclass(frozen=True, kw_only=True)
class ExperimentConfig:
    """`gptlineage experiment`: the parts of the deliverable, each ROLE=ARTIFACT."""

    part: tuple[str, ...] = setting(
        (), "ROLE=PATH of one result of the experiment (repeatable); the first is the headline model"
    )
    output: Path = output_setting("index.html, summary.json")
    name: str | None = setting(
        None, "the experiment's name on its page (default: the first part's folder name; a sweep's is its own)"
    )
    override: tuple[str, ...] = setting(
        (),
        "SLICE.KEY=VALUE: a setting this named experiment changes from the default experiment's, shown on "
        "its page (repeatable; the workflow passes each of a sweep's)",
    )

    def __post_init__(self) -> None:
        check_settings(self)
        if not self.part:
            raise SettingError("part", "is required (at least one ROLE=PATH)")
        roles = [text.partition("=")[0] for text in self.part]
        for text, role in zip(self.part, roles):
            if "=" not in text or not ROLE.fullmatch(role) or not text.partition("=")[2]:
                raise SettingError("part", f"must be ROLE=PATH with a lowercase role, got {text!r}")
        if len(set(roles)) != len(roles):
            raise SettingError("part", f"names a role twice: {', '.join(sorted(roles))}")
        if self.name is not None and not self.name.strip():
            raise SettingError("name", "must not be empty")
        for text in self.override:
            if not OVERRIDE.fullmatch(text):
                raise SettingError("override", f"must be SLICE.KEY=VALUE (sft_stage2.lr=0.0004), got {text!r}")

    def parts(self) -> dict[str, Path]:
        return {text.partition("=")[0]: Path(text.partition("=")[2]) for text in self.part}
