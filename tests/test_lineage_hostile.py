"""Hostile and damaged manifests: every `gptlineage lineage` reader answers with one error line.

Each row of CASES damages a copy of a real chain (small-data -> data-csv), runs one command
and checks: exit status != 0, exactly one stderr line `error: lineage: ...` with the expected
words, no traceback, no raw control character, and not one byte changed anywhere in the
temporary tree (so nothing written outside the named output, nor the output itself).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import one_line_error

from gptlineage.cli import main
from gptlineage.lineage import rocrate, walk
from gptlineage.lineage.artifact import MANIFEST, SEAL_KEY, artifact_id, content_sha256, manifest_sha256
from gptlineage.lineage.outputs import HOST_TAG

REPO = Path(__file__).resolve().parent.parent
ZERO_ID = "0" * 64


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """results/small_data -> results/data_csv, made by the real commands (about a second)."""
    root = tmp_path_factory.mktemp("pristine")
    results = root / "results"
    assert main(["small-data", "--output", str(results / "small_data")]) == 0
    csv = results / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "2", "--output", str(results / "data_csv")]) == 0
    return root


@pytest.fixture
def work(pristine, tmp_path) -> Path:
    """A fresh copy of the chain under tmp_path/w (tmp_path itself is watched for stray writes)."""
    shutil.copytree(pristine, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


# ---------------------------------------------------------------- damage helpers


def load(artifact: Path) -> dict[str, Any]:
    return json.loads((artifact / MANIFEST).read_text(encoding="utf-8"))


def save(artifact: Path, manifest: Any, rehash: bool = True) -> None:
    """Write MANIFEST, with its id and seal recomputed (as a forger would) where its shape allows."""
    if rehash:
        try:
            manifest["id"] = artifact_id(manifest)
            manifest[SEAL_KEY] = manifest_sha256(manifest)
        except (KeyError, TypeError, AttributeError, ValueError):
            pass
    (artifact / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def edit(artifact: Path, change: Callable[[dict[str, Any]], None], rehash: bool = True) -> None:
    manifest = load(artifact)
    change(manifest)
    save(artifact, manifest, rehash)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def file_entry(work: Path, relative: str, target: Path) -> dict[str, Any]:
    return {"path": relative, "bytes": target.stat().st_size, "sha256": sha256(target)}


def csv_of(work: Path) -> Path:
    return work / "results" / "data_csv"


def small(work: Path) -> Path:
    return work / "results" / "small_data"


def climbing_file_entry(work: Path) -> None:
    """The issue's first case: a `files` path out of the artifact, the id recomputed."""
    payload = work / "payload.txt"
    payload.write_text("planted\n")
    edit(csv_of(work), lambda m: m["files"].append(file_entry(work, "../../payload.txt", payload)))


def absolute_file_entry(work: Path) -> None:
    payload = work / "payload.txt"
    payload.write_text("planted\n")
    edit(csv_of(work), lambda m: m["files"].append(file_entry(work, str(payload), payload)))


def secret(work: Path) -> Path:
    path = work.parent / "secret.txt"
    path.write_text("do not copy\n")
    path.chmod(0o600)
    return path


def absolute_secret_input(work: Path) -> None:
    """An input naming a readable secret by absolute path (its true hash: the id check passes)."""
    path = secret(work)
    edit(csv_of(work), lambda m: m["inputs"].append({"role": "x", "path": str(path), "sha256": sha256(path)}))


def relative_secret_input_wrong_hash(work: Path) -> None:
    path = secret(work)
    relative = os.path.relpath(path, csv_of(work))
    edit(csv_of(work), lambda m: m["inputs"].append({"role": "x", "path": relative, "sha256": "1" * 64}))


def climbing_input_hash(work: Path) -> None:
    edit(csv_of(work), lambda m: m["inputs"][0].update(sha256="../../victim"))


def input_outside_its_artifact(work: Path) -> None:
    """An artifact input whose file lies outside the artifact it names (true hash, id recomputed)."""
    payload = work / "payload.txt"
    payload.write_text("planted\n")
    edit(csv_of(work), lambda m: m["inputs"][0].update(path="../../payload.txt", sha256=sha256(payload)))


def device_input(work: Path) -> None:
    """A source input that is a device outside the project: hashing /dev/zero would never end."""
    relative = os.path.relpath("/dev/zero", csv_of(work))
    edit(csv_of(work), lambda m: m["inputs"].append({"role": "zero", "path": relative, "sha256": "2" * 64}))


def symlinked_dir(work: Path) -> None:
    (csv_of(work) / "linked").symlink_to("../small_data", target_is_directory=True)


def empty_dir(work: Path) -> None:
    (csv_of(work) / "empty").mkdir()


def dangling_link(work: Path) -> None:
    (csv_of(work) / "dangling").symlink_to("nowhere")


def fifo(work: Path) -> None:
    os.mkfifo(csv_of(work) / "pipe")


def escape_in_name(work: Path) -> None:
    (csv_of(work) / "\x1b[8mhidden").write_text("x")


def manifest_link(work: Path) -> None:
    real = work / "elsewhere.json"
    (csv_of(work) / MANIFEST).rename(real)
    (csv_of(work) / MANIFEST).symlink_to(real)


def not_json(work: Path) -> None:
    (csv_of(work) / MANIFEST).write_text("{\n", encoding="utf-8")


def huge_number(work: Path) -> None:
    text = (csv_of(work) / MANIFEST).read_text(encoding="utf-8")
    (csv_of(work) / MANIFEST).write_text(text.replace('"seed": 0', '"seed": 1' + "0" * 5000), encoding="utf-8")


def nan_parameter(work: Path) -> None:
    text = (csv_of(work) / MANIFEST).read_text(encoding="utf-8")
    (csv_of(work) / MANIFEST).write_text(text.replace('"lr": 0.05', '"lr": NaN'), encoding="utf-8")


def deep_nesting(work: Path) -> None:
    edit(csv_of(work), lambda m: m["parameters"].update(deep=json.loads("[" * 200 + "]" * 200)))


def upstream_files_missing(work: Path) -> None:
    edit(small(work), lambda m: m.pop("files"))


def bytes_not_int(work: Path) -> None:
    edit(csv_of(work), lambda m: m["files"][0].update(bytes="428"))


def inputs_not_a_list(work: Path) -> None:
    edit(csv_of(work), lambda m: m.update(inputs={"csv": "x"}))


def argv_not_a_list(work: Path) -> None:
    edit(csv_of(work), lambda m: m["command"].update(argv="gptlineage data-csv"))


def flipped_upstream_byte(work: Path) -> None:
    path = small(work) / "small_regression.csv"
    path.write_bytes(b"X" + path.read_bytes()[1:])


def rehashed_chain(work: Path) -> None:
    """Change the upstream CSV and re-seal the chain by hand (files, the input's sha256 and
    content_sha256, ids and seals): only a pinned content hash notices, as it covers the inputs'."""
    path = small(work) / "small_regression.csv"
    path.write_bytes(path.read_bytes().replace(b"0.", b"1.", 1))

    def refile(manifest: dict[str, Any]) -> None:
        for entry in manifest["files"]:
            if entry["path"] == path.name:
                entry.update(file_entry(work, path.name, path))

    edit(small(work), refile)
    upstream_id = load(small(work))["id"]
    upstream_content = content_sha256(load(small(work)))
    edit(
        csv_of(work),
        lambda m: m["inputs"][0].update(artifact_id=upstream_id, sha256=sha256(path), content_sha256=upstream_content),
    )


def a_file(work: Path) -> None:
    (work / "taken").write_text("mine\n")


def nothing(work: Path) -> None:
    return None


# ---------------------------------------------------------------- the table


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Path], None]
    argv: tuple[str, ...]  # {w}: the copied tree, {id}/{content}: data_csv's id/content_sha256 before
    error: str  # words the one stderr line must hold
    stdout: str = ""  # words stdout must hold (verify's FAILED lines)


VERIFY = ("lineage", "verify", "{w}/results/data_csv")
SHOW = ("lineage", "show", "{w}/results/data_csv")
CRATE = ("lineage", "export", "{w}/results/data_csv", "--format", "ro-crate", "--output", "{w}/crate")
PROV = ("lineage", "export", "{w}/results/data_csv", "--output", "{w}/prov.json")
CLIMB = "files[2].path '../../payload.txt' is not a plain relative path inside the artifact"

CASES = [
    Case("files-path-climbs/verify", climbing_file_entry, VERIFY, CLIMB),
    Case("files-path-climbs/ro-crate", climbing_file_entry, CRATE, CLIMB),
    Case("files-path-climbs/prov", climbing_file_entry, PROV, CLIMB),
    Case("files-path-absolute", absolute_file_entry, VERIFY, "files[2].path '/"),
    Case("input-absolute-secret/ro-crate", absolute_secret_input, CRATE, "inputs[1].path '/"),
    Case("input-secret-wrong-hash/ro-crate", relative_secret_input_wrong_hash, CRATE, "its lineage does not verify"),
    Case("input-sha256-climbs/ro-crate", climbing_input_hash, CRATE, "inputs[0].sha256 '../../victim' is not 64 hex"),
    Case(
        "input-outside-its-artifact", input_outside_its_artifact, VERIFY, "verify FAILED", "lies outside its artifact"
    ),
    Case("input-outside-its-artifact/ro-crate", input_outside_its_artifact, CRATE, "lies outside its artifact"),
    Case("input-is-a-device", device_input, VERIFY, "verify FAILED", "leaves the project"),  # never opened
    Case("symlinked-dir", symlinked_dir, VERIFY, "verify FAILED", "linked: a symbolic link"),
    Case("symlinked-dir/ro-crate", symlinked_dir, CRATE, "linked: a symbolic link"),
    Case("empty-dir", empty_dir, VERIFY, "verify FAILED", "empty: a directory not in the manifest"),
    Case("dangling-link", dangling_link, VERIFY, "verify FAILED", "dangling: a symbolic link"),
    Case("fifo", fifo, VERIFY, "verify FAILED", "pipe: not a regular file"),
    Case("escape-in-file-name", escape_in_name, VERIFY, "verify FAILED", "\\x1b[8mhidden: not in the manifest"),
    Case("manifest-is-a-link", manifest_link, VERIFY, "manifest.json: not a regular file"),
    Case("typo-path", nothing, ("lineage", "verify", "{w}/results/data_csv/typo.json"), "no such file or directory"),
    Case("manifest-not-json/verify", not_json, VERIFY, "data_csv/manifest.json: not valid JSON"),
    Case("manifest-not-json/show", not_json, SHOW, "data_csv/manifest.json: not valid JSON"),
    Case("number-of-5000-digits", huge_number, SHOW, "manifest.json: not valid JSON (Exceeds the limit"),
    Case("nan-parameter", nan_parameter, SHOW, "parameters.lr is not a finite number"),
    Case("deep-nesting", deep_nesting, SHOW, "is nested deeper than 64 levels"),
    Case("upstream-files-missing/verify", upstream_files_missing, VERIFY, "small_data/manifest.json: files is missing"),
    Case("upstream-files-missing/prov", upstream_files_missing, PROV, "small_data/manifest.json: files is missing"),
    Case("bytes-not-int/show", bytes_not_int, SHOW, "files[0].bytes '428' is not a byte count"),
    Case("inputs-not-a-list/verify", inputs_not_a_list, VERIFY, "inputs {'csv': 'x'} is not a list"),
    Case("argv-not-a-list/ro-crate", argv_not_a_list, CRATE, "command.argv 'gptlineage data-csv' is not a list"),
    Case("unverified/prov", flipped_upstream_byte, PROV, "its lineage does not verify (2 problems, the first:"),
    Case("unverified/ro-crate", flipped_upstream_byte, CRATE, "no RO-Crate written"),
    Case("expect-id", nothing, (*VERIFY, "--expect-id", ZERO_ID), "verify FAILED", f"expected {ZERO_ID}"),
    Case("rehashed-chain", rehashed_chain, (*VERIFY, "--expect-content", "{content}"), "verify FAILED", ", expected "),
    Case(
        "prov-into-manifest",
        nothing,
        (*PROV[:3], "--output", "{w}/results/data_csv/manifest.json"),
        "inside the artifact",
    ),
    Case(
        "prov-into-upstream-file",
        nothing,
        (*PROV[:3], "--output", "{w}/results/small_data/small_regression.csv"),
        "an input of data_csv; write the PROV-JSON elsewhere",
    ),
    Case("prov-output-is-a-dir", nothing, (*PROV[:3], "--output", "{w}"), "is a directory"),
    Case("prov-missing-parent", nothing, (*PROV[:3], "--output", "{w}/no/such/prov.json"), "does not exist"),
    Case("crate-output-is-a-file", a_file, (*CRATE[:5], "--output", "{w}/taken"), "is not an RO-Crate"),
    Case("no-sources-with-prov", nothing, (*PROV, "--no-sources"), "--no-sources applies to --format ro-crate"),
    Case("zip-with-prov", nothing, (*PROV, "--zip"), "--zip applies to --format ro-crate only"),
    Case("crate-without-output", nothing, CRATE[:5], "--format ro-crate needs --output DIR (the crate is a directory)"),
    Case("zip-not-a-zip", nothing, (*CRATE, "--zip"), "--zip: --output {w}/crate must name a .zip file"),
    Case(
        "sources-not-a-dir", nothing, (*VERIFY, "--sources", "{w}/nowhere"), "--sources {w}/nowhere: no such directory"
    ),
    Case("bad-content-hash", nothing, (*VERIFY, "--expect-content", "XY"), "--expect-content 'XY' is not an artifact"),
    Case(
        "negative-tolerance",
        nothing,
        ("lineage", "reproduce", "{w}/results/data_csv", "--tolerance", "-1"),
        "--tolerance must be >= 0, got -1.0",
    ),
    Case(
        "nan-tolerance",
        nothing,
        ("lineage", "reproduce", "{w}/results/data_csv", "--tolerance", "nan"),
        "--tolerance must be finite, got nan",
    ),
]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ROOT (links not followed): kind, and the bytes' hash or the link's target."""
    seen: dict[str, tuple] = {}
    for folder, directories, files in os.walk(root):
        for name in directories + files:
            path = Path(folder, name)
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                seen[str(path)] = ("link", os.readlink(path))
            elif stat.S_ISREG(mode):
                seen[str(path)] = ("file", sha256(path), stat.S_IMODE(mode))
            else:
                seen[str(path)] = ("other", stat.S_IFMT(mode))
    return seen


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_hostile_lineage_is_one_error_line_and_changes_nothing(case, work, capsys):
    original_id = load(csv_of(work))["id"]
    original_content = content_sha256(load(csv_of(work)))
    case.damage(work)
    watched = work.parent
    before = snapshot(watched)
    code = main([word.format(w=work, id=original_id, content=original_content) for word in case.argv])
    out, err = capsys.readouterr()
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("error: lineage: "), err
    assert case.error.replace("{w}", str(work)) in err, err
    assert case.stdout in out, out
    assert "Traceback" not in out + err and "\x1b" not in out + err
    assert snapshot(watched) == before


def test_a_pinned_id_passes_when_it_matches(work, capsys):
    manifest_id = load(csv_of(work))["id"]
    assert main([*(word.format(w=work) for word in VERIFY), "--expect-id", manifest_id]) == 0
    assert capsys.readouterr().out.startswith("OK: 2 artifacts")


def test_results_edited_and_resealed_by_hand_fail_only_a_pinned_content_hash(work, capsys):
    """The id pins the work, not its results: a forger who edits the top artifact's output and
    re-seals its manifest keeps the id; the content_sha256 printed by verify, pinned, notices."""
    top = csv_of(work)
    pinned_id, pinned_content = load(top)["id"], content_sha256(load(top))
    target = next(path for path in top.iterdir() if path.suffix == ".json" and path.name != MANIFEST)
    target.write_text(target.read_text(encoding="utf-8") + " ", encoding="utf-8")
    edit(
        top, lambda m: [e.update(file_entry(work, target.name, target)) for e in m["files"] if e["path"] == target.name]
    )
    assert load(top)["id"] == pinned_id
    argv = [word.format(w=work) for word in VERIFY]
    assert main([*argv, "--expect-id", pinned_id]) == 0
    assert f"content_sha256 {content_sha256(load(top))}" in capsys.readouterr().out
    assert main([*argv, "--expect-id", pinned_id, "--expect-content", pinned_content]) == 1
    out, err = capsys.readouterr()
    assert f"expected {pinned_content}" in out and err.startswith("error: lineage: ") and err.count("\n") == 1


def test_a_malformed_pinned_id_is_a_flag_error(work, capsys):
    assert main([*(word.format(w=work) for word in VERIFY), "--expect-id", "abc"]) == 1
    err = capsys.readouterr().err
    assert err == "error: lineage: --expect-id 'abc' is not an artifact id (64 lowercase hex digits)\n"


def test_control_characters_in_listed_names_are_escaped_by_show_and_verify(work, capsys):
    """A listed file named with ESC[8m (conceal): show and verify print it escaped, and a FAILED
    line about it stays visible."""
    name = "\x1b[8mnote.txt"
    target = csv_of(work) / name
    target.write_text("note\n")
    edit(csv_of(work), lambda m: m["files"].append(file_entry(work, name, target)))
    assert main(list(SHOW[:2]) + [str(csv_of(work)), "--full"]) == 0  # the compact view lists no files
    shown = capsys.readouterr().out
    assert "file: \\x1b[8mnote.txt (5 bytes)" in shown and "\x1b" not in shown
    assert main([*VERIFY[:2], str(csv_of(work))]) == 0
    target.write_text("changed\n")
    assert main([*VERIFY[:2], str(csv_of(work))]) == 1
    out, err = capsys.readouterr()
    assert "FAILED " in out and "\\x1b[8mnote.txt: changed" in out and "\x1b" not in out + err


def test_exports_of_a_verified_chain_write_only_inside_their_output(work, capsys):
    watched = work.parent
    before = snapshot(watched)
    assert main([word.format(w=work) for word in CRATE]) == 0
    assert main([word.format(w=work) for word in PROV]) == 0
    assert main(["experiment", "--part", f"model={csv_of(work)}", "--output", str(work / "page")]) == 0
    after = snapshot(watched)
    added = {Path(path).relative_to(work).parts[0] for path in set(after) - set(before)}
    assert added == {"crate", "prov.json", "page"}
    assert all(after[path] == state for path, state in before.items())


def test_no_sources_leaves_source_bytes_out_of_the_crate(pristine, tmp_path, capsys):
    """A plain source input (outside any artifact) is copied only without --no-sources."""
    source = tmp_path / "data.csv"
    shutil.copyfile(pristine / "results" / "small_data" / "small_regression.csv", source)
    output = tmp_path / "results" / "csv_run"
    assert main(["data-csv", "--csv", str(source), "--steps", "1", "--output", str(output)]) == 0
    digest = sha256(source)
    with_sources, without = tmp_path / "with.crate", tmp_path / "without.crate"
    assert main(["lineage", "export", str(output), "--format", "ro-crate", "--output", str(with_sources)]) == 0
    assert (with_sources / "sources" / digest[:12] / "data.csv").read_bytes() == source.read_bytes()
    argv = ["lineage", "export", str(output), "--format", "ro-crate", "--output", str(without), "--no-sources"]
    assert main(argv) == 0
    assert not (without / "sources").exists()
    graph = {e["@id"]: e for e in json.loads((without / "ro-crate-metadata.json").read_text())["@graph"]}
    assert graph[f"#source-{digest}"]["identifier"] == f"sha256:{digest}"
    objects, parts = graph["#lineage-run"]["object"], graph["./"]["hasPart"]  # one-element lists unpacked
    assert {"@id": f"#source-{digest}"} in (objects if isinstance(objects, list) else [objects])
    assert {"@id": f"#source-{digest}"} not in (parts if isinstance(parts, list) else [parts])


# ---------------------------------------------------------------- random manifests (hypothesis)

HOSTILE_TEXT = [
    "..",
    "../../payload.txt",
    "/etc/hostname",
    "a/../b",
    "",
    ".",
    "a//b",
    "sub/",
    "x\x00y",
    "\x1b[8mhidden",
    "\u202ertl",
    "\ud800",
    "manifest.json",
    "../small_data",
    "../../../../../../../../dev/zero",
    "../../victim",
    "0" * 64,
    "trainlog.json",
]
# Keys whose values the shape check leaves free (any text a command may record).
FREE = ("parameters", "summary", "command", "run", "environment")
HUGE = "HUGE-NUMBER"  # replaced by 1 followed by 5000 zeros in the written text (json.dumps refuses it)
NUMBERS = [10**400, -1, 1e308, float("inf"), float("nan"), True, 0.5, 2**63, HUGE]


def paths_of(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path in a JSON value (dict keys and list indexes), the empty path included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += paths_of(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += paths_of(child, (*prefix, index))
    return found


def mutate(manifest: dict[str, Any], path: tuple, action: str, value: Any) -> None:
    if not path:
        return
    holder: Any = manifest
    for key in path[:-1]:
        holder = holder[key]
    if action == "delete":
        del holder[path[-1]]
    elif action == "append" and isinstance(holder[path[-1]], list):
        holder[path[-1]].append(value)
    else:
        holder[path[-1]] = value


def hostile_values():
    from hypothesis import strategies as st

    leaf = st.one_of(
        st.sampled_from(HOSTILE_TEXT),
        st.sampled_from(NUMBERS),
        st.none(),
        st.text(max_size=6),
        st.integers(),
    )
    entry = st.fixed_dictionaries(
        {},
        optional={
            "path": st.sampled_from(HOSTILE_TEXT),
            "bytes": st.sampled_from(NUMBERS),
            "sha256": st.sampled_from(HOSTILE_TEXT),
            "role": st.sampled_from(HOSTILE_TEXT),
            "artifact_id": st.sampled_from(HOSTILE_TEXT),
            "artifact_path": st.sampled_from(HOSTILE_TEXT),
            "tree_sha256": st.sampled_from(HOSTILE_TEXT),
        },
    )
    nested = st.recursive(
        leaf,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
        max_leaves=6,
    )
    return st.one_of(leaf, entry, nested)


def run_quietly(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_random_manifests_never_crash_a_reader_nor_write_outside_the_output(pristine):
    """Random damage to a real manifest (missing keys, wrong types, `..`, absolute paths, huge
    numbers, control characters), re-hashed or not: verify, show, both exports and the experiment's
    page either succeed or print one `error:` line, and nothing changes outside --output."""
    import tempfile

    from hypothesis import HealthCheck, event, given, settings
    from hypothesis import strategies as st

    manifests = {name: load(pristine / "results" / name) for name in ("data_csv", "small_data")}

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def check(data):
        name = data.draw(st.sampled_from(sorted(manifests)), label="artifact")
        manifest = json.loads(json.dumps(manifests[name]))
        # Half the examples change only what the shape leaves free (texts and values a verified
        # lineage may hold), re-hashed, so the exporters run on hostile strings too.
        free = data.draw(st.booleans(), label="free fields only")
        for _ in range(data.draw(st.integers(1, 3), label="edits")):
            paths = [p for p in paths_of(manifest) if not free or (p and p[0] in FREE and len(p) > 1)]
            path = data.draw(st.sampled_from(paths), label="path")
            action = "set" if free else data.draw(st.sampled_from(["set", "delete", "append"]), label="action")
            value = data.draw(st.sampled_from(HOSTILE_TEXT[:11] + HOSTILE_TEXT[12:]) if free else hostile_values())
            mutate(manifest, path, action, value)
        rehash = free or data.draw(st.booleans(), label="rehash")
        with tempfile.TemporaryDirectory() as temporary:
            root = Path(temporary)
            work = root / "w"
            shutil.copytree(pristine, work, symlinks=True)
            if rehash:
                try:
                    manifest["id"] = artifact_id(manifest)
                    manifest[SEAL_KEY] = manifest_sha256(manifest)
                except (KeyError, TypeError, AttributeError, ValueError, IndexError):
                    pass
            text = json.dumps(manifest).replace(json.dumps(HUGE), "1" + "0" * 5000)
            (work / "results" / name / MANIFEST).write_text(text, encoding="utf-8", errors="surrogatepass")
            out = root / "out"
            out.mkdir()
            before = snapshot(work)
            target = str(work / "results" / "data_csv")
            for argv in (
                ["lineage", "verify", target],
                ["lineage", "show", target],
                ["lineage", "export", target, "--output", str(out / "prov.json")],
                ["lineage", "export", target, "--format", "ro-crate", "--output", str(out / "crate")],
                ["experiment", "--part", f"model={target}", "--output", str(out / "page")],
            ):
                code, stdout, stderr = run_quietly(argv)
                event(f"{argv[1]} {argv[3] if argv[1] == 'export' else ''} exit {code}")  # --hypothesis-show-statistics
                assert code in (0, 1), (argv, code)
                assert "\x1b" not in stdout + stderr
                if code:
                    assert stderr.count("\n") == 1 and stderr.startswith(f"error: {argv[0]}: "), stderr
                else:
                    assert stderr == ""
            assert snapshot(work) == before
            assert sorted(p.name for p in root.iterdir()) == ["out", "w"]

    check()


@pytest.fixture(scope="module")
def lineage(tmp_path_factory) -> Path:
    """A two-artifact lineage: small-data, and a data-csv run on its table."""
    root = tmp_path_factory.mktemp("lineage")
    assert main(["small-data", "--output", str(root / "small_data")]) == 0
    csv = root / "small_data" / "small_regression.csv"
    assert main(["data-csv", "--csv", str(csv), "--steps", "2", "--output", str(root / "data_csv")]) == 0
    return root / "data_csv"


def test_a_zip_inside_an_artifact_is_refused_before_its_build_folder_exists(lineage, capsys, monkeypatch):
    """The build folder .crate.zip.build-XXXX was made inside the artifact before the refusal: a kill
    (or a verify meanwhile) in that window saw an artifact with a file its manifest does not list."""
    seen = []

    def watching(output, nodes, what):  # what the artifact holds when the refusal is decided
        seen.append(sorted(path.name for path in lineage.iterdir()))
        return refuse_inside(output, nodes, what)

    refuse_inside = walk.refuse_inside  # called by the exporters' gate, walk.verified_lineage
    monkeypatch.setattr(walk, "refuse_inside", watching)
    before = sorted(path.name for path in lineage.iterdir())
    argv = ["lineage", "export", str(lineage), "--format", "ro-crate", "--zip", "--output", str(lineage / "crate.zip")]
    assert "inside the artifact" in one_line_error(argv, capsys)
    assert seen == [before] and sorted(path.name for path in lineage.iterdir()) == before


def test_a_killed_zip_export_leaves_a_folder_the_next_export_removes(lineage, tmp_path, capsys):
    """A killed --zip export left .crate.zip.build-XXXX/ (and a partial zip) that no export removed."""
    killed = (
        "import os, signal, sys\n"
        "import gptlineage.lineage.crate_place as place\n"
        "place.zipfile.ZipFile = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # the crate is built\n"
        "from gptlineage.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    argv = ["lineage", "export", str(lineage), "--format", "ro-crate", "--zip", "--output", str(tmp_path / "crate.zip")]
    environment = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    subprocess.run([sys.executable, "-c", killed, *argv], env=environment, check=False, capture_output=True)
    left = [path.name for path in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(f".crate.zip.tmp-{HOST_TAG}-"), left
    live = tmp_path / f".crate.zip.tmp-{HOST_TAG}-1"  # pid 1 lives: its folder is kept
    live.mkdir()
    assert main(argv) == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["crate.zip", live.name])
    assert "ro-crate-metadata.json" in zipfile.ZipFile(tmp_path / "crate.zip").namelist()


@pytest.mark.parametrize("zipped", [False, True])
def test_a_full_disk_names_the_crate_and_leaves_nothing(lineage, tmp_path, capsys, monkeypatch, zipped):
    """A full disk said 'no space left on device writing standard output' (a file object's write names
    no file); now the project's one line naming the crate, and nothing is left beside it."""

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rocrate, "write_json_atomic", full)  # the metadata, written last into the crate
    output = tmp_path / ("crate.zip" if zipped else "crate")
    argv = ["lineage", "export", str(lineage), "--format", "ro-crate", "--output", str(output)]
    err = one_line_error(argv + (["--zip"] if zipped else []), capsys)
    assert err == f"error: lineage: no space left on device writing {output}"
    assert list(tmp_path.iterdir()) == []
