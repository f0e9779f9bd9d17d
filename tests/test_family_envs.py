"""Every rule family's commands run in an environment holding exactly its envs/<family>.yaml
packages (and what those install in turn), and their artifacts record that environment: a
package the environment lacks is recorded as null (`"torch": null` for the corpus family).

Creating the conda environments needs the channels, so each one is stood in for by a bare
virtual environment whose site-packages links only the family's distributions (and their
requirements, read from the installed metadata) out of this interpreter's: a left-out package
is neither importable nor has metadata there, as in the conda environment. The `lineage`
command (the lineage layer imports no torch) runs in the reporting family's packages less torch.

Example:
    python -m pytest -q tests/test_family_envs.py
"""

from __future__ import annotations

import json
import os
import subprocess
import venv
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY_TRAIN
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_envs import FAMILIES, SOURCE_ROOT, distribution, read_env, third_party_imports

from gptlineage.corpus.shards import ShardWriter
from gptlineage.interface import registry

REPO = SOURCE_ROOT.parent
PLAYS = REPO / "data" / "shakespeare" / "plays.jsonl.gz"
# Every third-party module the package imports anywhere: each family's stand-in must lack the
# ones its packages do not install.
ALL_IMPORTS = sorted(
    {name for command in registry.commands() for name in third_party_imports(command.module, SOURCE_ROOT)}
)
RANDOM_MODEL = [
    "--random-init",
    "--preset",
    "quick",
    "--context",
    "96",
    "--width",
    "8",
    "--heads",
    "2",
    "--layers",
    "1",
]
# Run in the stand-in: check that no left-out module is importable, then run each command in
# this one process (torch is imported once), and print the exit codes as the last line.
CHILD = """
import importlib.util, json, sys
left_out, commands = json.loads(sys.argv[1])
present = [name for name in left_out if importlib.util.find_spec(name) is not None]
from gptlineage.cli import main
codes = [main(argv) for argv in commands]
print("\\nRESULT " + json.dumps({"present": present, "codes": codes}))
"""


def requirement_closure(names: set[str]) -> set[str]:
    """The installed distributions NAMES install, with every requirement they install in turn
    (markers evaluated here, extras followed)."""
    found: set[str] = set()
    pending = [(canonicalize_name(name), "") for name in names]
    while pending:
        name, extra = pending.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement this interpreter does not install (another platform's)
        if extra == "" and name in found:
            continue
        found.add(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                pending.append((canonicalize_name(requirement.name), ""))
                pending.extend((canonicalize_name(requirement.name), wanted) for wanted in requirement.extras)
    return found


def stand_in(root: Path, packages: set[str]) -> Path:
    """A virtual environment at ROOT whose site-packages links PACKAGES' distributions (and their
    requirements) and finds the checkout's package; returns its python."""
    venv.create(root, with_pip=False, symlinks=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    for name in sorted(requirement_closure(packages)):
        dist = metadata.distribution(name)
        assert dist.files is not None, f"{name}: no RECORD of its files"
        for top in sorted({file.parts[0] for file in dist.files}):
            if top in ("..", "__pycache__") or top.endswith(".pth") or (site / top).exists():
                continue
            (site / top).symlink_to(dist.locate_file(top))
    (site / "gptlineage-checkout.pth").write_text(f"{SOURCE_ROOT}\n", encoding="utf-8")
    return root / "bin" / "python"


def family_packages(family: str) -> set[str]:
    if family == "lineage":
        return set(read_env("reporting")[1]) - {"torch"}
    return set(read_env(family)[1])


def left_out(packages: set[str]) -> list[str]:
    """The package's third-party imports whose distribution PACKAGES do not install."""
    closure = requirement_closure(packages)
    return [name for name in ALL_IMPORTS if distribution(name) not in closure]


def run_family(tmp_path: Path, family: str, commands: list[list[str]]) -> None:
    """Run COMMANDS (gptlineage argv lists) in FAMILY's stand-in; each must exit 0."""
    packages = family_packages(family)
    python = stand_in(tmp_path / f"env-{family}", packages)
    missing = left_out(packages)
    environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [python, "-c", CHILD, json.dumps([missing, commands])],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and "RESULT " in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.rpartition("RESULT ")[2])
    assert result["present"] == [], f"{family}: importable though its env leaves them out"
    assert result["codes"] == [0] * len(commands), done.stderr[-3000:]


def environment(artifact: Path) -> dict:
    return json.loads((artifact / "manifest.json").read_text(encoding="utf-8"))["environment"]


def expected_torch(family: str) -> str | None:
    return metadata.version("torch") if "torch" in family_packages(family) else None


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    """The corpus, tabular, training, generation and reporting families' artifacts, each family
    run in its own stand-in (training on tiny 1,024-token shards, generation on its run)."""
    root = tmp_path_factory.mktemp("families")
    out = {name: root / name for name in ("synth", "plays", "chat", "small", "csv", "npy", "run", "best")}
    run_family(
        root,
        "corpus",
        [
            ["synth-chat", "--stage1-dialogues", "40", "--stage2-dialogues-per-split", "10", "--suite-prompts", "5"]
            + ["--output", str(out["synth"])],
            ["prepare", "--input", str(PLAYS), "--max-documents", "40", "--validation-fraction", "0.2"]
            + ["--output", str(out["plays"])],
            ["prepare", "--hf-dataset", str(out["synth"] / "stage1"), "--messages-column", "messages"]
            + ["--validation-fraction", "0.2", "--record-context", "64", "--output", str(out["chat"])],
        ],
    )
    small = out["small"]
    run_family(
        root,
        "tabular",
        [
            ["small-data", "--output", str(small)],
            ["data-csv", "--csv", str(small / "small_regression.csv"), "--steps", "3", "--output", str(out["csv"])],
            ["data-npy", "--x", str(small / "small_regression_X.npy"), "--y", str(small / "small_regression_y.npy")]
            + ["--steps", "3", "--output", str(out["npy"])],
        ],
    )
    write_shards(root / "shards")
    run_family(
        root,
        "training",
        [
            ["train", *TINY_TRAIN, "--data", str(root / "shards"), "--steps", "2", "--eval-every", "1"]
            + ["--checkpoint-every", "2", "--output", str(out["run"])],
            ["select-best", "--run", str(out["run"]), "--output", str(out["best"])],
        ],
    )
    return out


def write_shards(directory: Path) -> None:
    directory.mkdir()
    rng = np.random.default_rng(0)
    for name, length in (("train.bin", 2000), ("val.bin", 600)):
        with ShardWriter(directory / name, vocab_size=1024) as writer:
            writer.write(rng.integers(0, 1024, length).astype(np.uint16))


FAMILY_OUTPUTS = {
    "corpus": ("synth", "plays", "chat"),
    "tabular": ("small", "csv", "npy"),
    "training": ("run", "best"),
}


@pytest.mark.parametrize("family", sorted(FAMILY_OUTPUTS))
def test_family_artifacts_record_their_environment(built, family):
    for name in FAMILY_OUTPUTS[family]:
        recorded = environment(built[name])
        assert recorded["torch"] == expected_torch(family), (family, name)
        assert recorded["numpy"] == metadata.version("numpy")
        # torch's thread count only where the command computed with torch (small-data writes its
        # table with NumPy alone)
        computed_with_torch = family != "corpus" and name != "small"
        assert (recorded["threads"] is None) != computed_with_torch, (family, name, recorded["threads"])


def test_corpus_stand_in_lacks_torch_and_tabular_lacks_the_tokenizer():
    """The stand-ins are what the env files say: the check above is no check with everything installed."""
    assert "torch" in left_out(family_packages("corpus")) and "torch" in left_out(family_packages("lineage"))
    assert "tiktoken" in left_out(family_packages("tabular"))
    assert {"transformers", "matplotlib"} <= set(left_out(family_packages("training")))
    # every family of the rules runs here: three in `built`, generation and reporting below
    assert set(FAMILY_OUTPUTS) | {"generation", "reporting"} == set(FAMILIES)


def test_generation_and_reporting_run_in_their_families(built, tmp_path):
    suite = tmp_path / "suite.json"
    cases = [{"prompt": "What is 2 + 2?", "expected": "4", "family": "arithmetic"}]
    suite.write_text(json.dumps({"schema": "gptlineage.prompt-suite.v1", "cases": cases}), encoding="utf-8")
    out = {name: tmp_path / name for name in ("check", "bench", "suite", "plots", "hf", "deliverable")}
    run_family(
        tmp_path,
        "generation",
        [
            ["cache-check", *RANDOM_MODEL, "--rollout", "3", "--output", str(out["check"])],
            ["cache-bench", *RANDOM_MODEL, "--generate", "4", "--timed-runs", "1", "--output", str(out["bench"])],
            ["prompt-suite", *RANDOM_MODEL, "--suite", str(suite), "--generate", "4", "--output", str(out["suite"])],
        ],
    )
    run_family(
        tmp_path,
        "reporting",
        [
            ["plots", "--run", str(built["run"]), "--output", str(out["plots"])],
            ["export-hf", *RANDOM_MODEL, "--output", str(out["hf"])],
            ["experiment", "--part", f"model={built['run']}", "--part", f"cache_check={out['check']}"]
            + ["--part", f"data_csv={built['csv']}", "--output", str(out["deliverable"])],
        ],
    )
    for name in out:
        assert environment(out[name])["torch"] == metadata.version("torch"), name


def test_lineage_commands_run_without_torch(built, tmp_path):
    """verify, show, table and diff of artifacts made with and without torch."""
    run_family(
        tmp_path,
        "lineage",
        [
            ["lineage", "verify", str(built["chat"])],
            ["lineage", "verify", str(built["best"])],
            ["lineage", "show", str(built["chat"])],
            ["lineage", "table", str(built["run"]), str(built["best"])],
            ["lineage", "diff", str(built["plays"]), str(built["chat"])],
        ],
    )
