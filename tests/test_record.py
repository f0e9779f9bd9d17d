"""`gptlineage record`: a command of one's own, run with `{output}` a staging folder, becomes an
artifact with lineage (its inputs by artifact id, its script by hash, its command as a parameter,
its metrics.json as its metrics), or, when anything is wrong, one error line and nothing written.

Example:
    python -m pytest -q tests/test_record.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gptlineage.cli import main
from gptlineage.lineage.hashing import sha256_file

TABLE = "results/small_data/small_regression.csv"
# The user's script: counts the table's rows; COUNT_METRICS, when set, is what it writes as metrics.json.
SCRIPT = """import json, os, sys
from pathlib import Path

table, out = Path(sys.argv[1]), Path(sys.argv[2])
rows = table.read_text(encoding="utf-8").splitlines()[1:]
print(f"counted {len(rows)} rows")
print("a note on stderr", file=sys.stderr)
(out / "count.txt").write_text(f"{len(rows)}\\n", encoding="utf-8")
seen = {"output": os.environ["GPTLINEAGE_OUTPUT"] == str(out), "inputs": os.environ["GPTLINEAGE_INPUTS"]}
(out / "seen.json").write_text(json.dumps(seen), encoding="utf-8")
metrics = os.environ.get("COUNT_METRICS") or json.dumps({"rows": len(rows), "half": len(rows) / 2})
(out / "metrics.json").write_text(metrics, encoding="utf-8")
"""


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A working directory with an artifact (results/small_data) and the script count.py."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("COUNT_METRICS", raising=False)
    assert main(["small-data", "--output", "results/small_data"]) == 0
    Path("count.py").write_text(SCRIPT, encoding="utf-8")
    return tmp_path


def record(output: str = "results/mine", *, flags: tuple[str, ...] = (), command: tuple[str, ...] = ()) -> int:
    """`gptlineage record` of count.py on the table (FLAGS: record's own, in place of the usual ones)."""
    flags = flags or ("--input", "results/small_data", "--code", "count.py", "--output", output)
    command = command or (sys.executable, "count.py", TABLE, "{output}")
    return main(["record", *flags, "--", *command])


def manifest(path: str) -> dict:
    return json.loads(Path(path, "manifest.json").read_text(encoding="utf-8"))


def leftovers(folder: str = "results") -> list[str]:
    return [entry.name for entry in Path(folder).iterdir() if entry.name.startswith(".")]


def test_the_command_s_outputs_become_an_artifact_with_lineage(project, capfd):
    assert record() == 0
    out, err = capfd.readouterr()
    assert "counted 25 rows" in out and "a note on stderr" in err  # the command's output passes through
    recorded = manifest("results/mine")
    by_role = {entry["role"]: entry for entry in recorded["inputs"]}
    assert by_role["input1"]["artifact_id"] == manifest("results/small_data")["id"]
    code = by_role["code:count.py"]
    assert code["sha256"] == sha256_file(Path("count.py")) and code["workdir_path"] == "count.py"
    # The command's words, each input path as its role and {output} as typed: no location.
    command = [sys.executable, "input:code:count.py", "input:input1/small_regression.csv", "{output}"]
    assert recorded["parameters"] == {"command": command}
    assert recorded["summary"] == {"rows": 25, "half": 12.5}
    assert [m["name"] for m in recorded["command"]["declaration"]["metrics"]] == ["rows", "half"]
    assert json.loads(Path("results/mine/seen.json").read_text()) == {"output": True, "inputs": "results/small_data"}
    assert leftovers() == []
    assert main(["lineage", "verify", "results/mine"]) == 0
    assert main(["lineage", "show", "results/mine"]) == 0
    assert "record" in capfd.readouterr().out
    assert main(["lineage", "table", "results", "--stage", "mine", "--json"]) == 0
    (row,) = json.loads(capfd.readouterr().out)
    assert (row["rows"], row["half"]) == (25, 12.5)  # metrics.json's numbers are the table's columns


def test_lineage_reproduce_reruns_the_command(project, capfd):
    assert record() == 0
    capfd.readouterr()
    assert main(["lineage", "reproduce", "results/mine", "--json"]) == 0
    report = json.loads(capfd.readouterr().out)
    assert report["reproduced"] and report["rerun_id"] == report["id"]
    assert {found["path"] for found in report["files"]} == {"count.txt", "seen.json", "metrics.json"}
    words = report["ran"]["words"]
    assert words[:2] == ["gptlineage", "record"]
    assert words[words.index("--") + 2 :] == ["count.py", TABLE, "{output}"]  # after the interpreter
    assert leftovers() == []


@pytest.mark.parametrize(
    ("index", "word"),
    [(-3, "evil.py"), (-2, "results/small_data/other.csv"), (-1, "{output}/x"), (None, "--extra")],
    ids=["script", "input-place", "plain-word", "added-word"],
)
def test_reproduce_refuses_words_the_id_does_not_cover(project, capfd, index, word):
    """The argv is data the id leaves out: a re-sealed edit of the command's words runs nothing."""
    from test_lineage_reproduce import reseal

    assert record() == 0
    (project / "evil.py").write_text("open('ran', 'w')\n", encoding="utf-8")

    def edit(manifest):
        argv = manifest["command"]["argv"]
        argv.append(word) if index is None else argv.__setitem__(index, word)

    reseal(project / "results/mine", edit)
    capfd.readouterr()
    assert main(["lineage", "reproduce", "results/mine"]) != 0
    assert "recorded argv's command is not the one its parameters hold" in capfd.readouterr().err
    assert not (project / "ran").exists() and leftovers() == []


def test_lineage_diff_compares_the_metrics(project, capfd, monkeypatch):
    assert record("results/a/mine") == 0
    monkeypatch.setenv("COUNT_METRICS", json.dumps({"rows": 24, "half": 12.5}))
    assert record("results/b/mine", command=(sys.executable, "count.py", TABLE, "{output}", "other")) == 0
    capfd.readouterr()
    main(["lineage", "diff", "results/a/mine", "results/b/mine", "--json"])
    rows = {row["metric"]: row for row in json.loads(capfd.readouterr().out)["metrics"]}
    assert (rows["rows"]["a"], rows["rows"]["b"], rows["rows"]["changed"]) == (25, 24, True)
    assert not rows["half"]["changed"]


def test_the_id_leaves_out_where_the_output_goes_and_the_order_of_the_flags(project):
    assert record() == 0
    moved = ("--output", "elsewhere/deeper/mine", "--code", "count.py", "--input", "results/small_data")
    assert record(flags=moved) == 0
    assert manifest("elsewhere/deeper/mine")["id"] == manifest("results/mine")["id"]
    both = ("--input", TABLE, "--input", "results/small_data", "--code", "count.py")
    assert record(flags=(*both, "--output", "results/two")) == 0
    swapped = ("--input", "results/small_data", "--code", "count.py", "--input", TABLE)
    assert record(flags=(*swapped, "--output", "results/three")) == 0
    assert manifest("results/two")["id"] == manifest("results/three")["id"] != manifest("results/mine")["id"]


def test_the_id_changes_with_the_script_and_with_the_command(project):
    assert record() == 0
    assert record("results/other_words", command=(sys.executable, "count.py", TABLE, "{output}", "--fast")) == 0
    Path("count.py").write_text(SCRIPT + "# edited\n", encoding="utf-8")
    assert record("results/edited") == 0
    ids = {manifest(f"results/{name}")["id"] for name in ("mine", "other_words", "edited")}
    assert len(ids) == 3


def one_error_line(capfd) -> str:
    err = capfd.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and err.rstrip("\n").endswith(lines[0]), err
    return lines[0]


def test_a_failing_command_is_one_line_and_leaves_the_artifact_there_as_it_was(project, capfd):
    assert record() == 0
    before = Path("results/mine/manifest.json").read_bytes()
    capfd.readouterr()
    failing = (sys.executable, "-c", "import sys; open(sys.argv[1] + '/half', 'w'); sys.exit(3)", "{output}")
    assert record(command=failing) == 1
    line = one_error_line(capfd)
    assert line.startswith("error: record: ") and line.endswith("exited with 3")
    assert Path("results/mine/manifest.json").read_bytes() == before and not Path("results/mine/half").exists()
    assert record("results/never", command=failing) == 1
    assert not Path("results/never").exists() and leftovers() == []


OUTSIDE = "../outside.py"
BAD = {
    "missing-input": ({"input": "results/missing"}, None, "--input results/missing: no such file"),
    "input-not-an-artifact": ({"input": "plain"}, None, "--input plain: not an artifact"),
    "missing-code": ({"code": "nothing.py"}, None, "--code nothing.py: no such file"),
    "code-outside-the-tree": ({"code": OUTSIDE}, None, f"--code {OUTSIDE}: outside the working directory"),
    "metrics-a-list": ({}, "[1, 2]", "metrics.json: not an object"),
    "metrics-nested": ({}, '{"a": {"b": 1}}', "metrics.json: 'a' is {\"b\": 1}, not a number"),
    "metrics-text": ({}, '{"a": "high"}', "metrics.json: 'a' is \"high\", not a number"),
    "metrics-true": ({}, '{"a": true}', "metrics.json: 'a' is true, not a number"),
    "metrics-nan": ({}, '{"a": NaN}', "metrics.json: 'a' is NaN, not a number"),
    "metrics-broken": ({}, '{"a": ', "metrics.json: not valid JSON"),
    "no-such-program": ({"program": "no-such-program-here"}, None, "cannot run no-such-program-here"),
}


@pytest.mark.parametrize(("given", "metrics", "expected"), BAD.values(), ids=BAD.keys())
def test_each_bad_input_is_one_line_and_writes_nothing(project, capfd, monkeypatch, given, metrics, expected):
    Path("plain").mkdir()
    (project.parent / "outside.py").write_text("", encoding="utf-8")
    if metrics is not None:
        monkeypatch.setenv("COUNT_METRICS", metrics)
    flags = ("--input", given.get("input", "results/small_data"), "--code", given.get("code", "count.py"))
    command = (given.get("program", sys.executable), "count.py", TABLE, "{output}")
    capfd.readouterr()
    assert record(flags=(*flags, "--output", "results/mine"), command=command) == 1
    line = one_error_line(capfd)
    assert line.startswith("error: record: ") and expected in line, line
    assert not Path("results/mine").exists() and leftovers() == []


def test_an_empty_command_is_one_line(project, capfd):
    with pytest.raises(SystemExit) as stopped:
        main(["record", "--input", "results/small_data", "--output", "results/mine", "--"])
    assert stopped.value.code == 2
    assert one_error_line(capfd) == "error: record: the following arguments are required: COMMAND"
    assert not Path("results/mine").exists()
