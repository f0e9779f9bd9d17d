"""`--precision auto`: bf16 where the CPU computes it natively (AMX, AVX512-BF16), float32 elsewhere.

The choice is made before the run, printed, and recorded as the precision the manifest names, so an
auto run is the same work (the same artifact id) as one that named the precision it chose.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY_MODEL as TINY

from gptlineage.cli import main
from gptlineage.core import devices
from gptlineage.core.cpus import cpu_model_and_flags

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Test Processor
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile
processor\t: 1
model name\t: Intel(R) Xeon(R) Test Processor
flags\t\t: fpu sse2
"""


def test_the_cpu_model_and_flags_are_the_first_cpus_and_nothing_without_the_file(tmp_path):
    (tmp_path / "cpuinfo").write_text(CPUINFO)
    model, flags = cpu_model_and_flags(str(tmp_path / "cpuinfo"))
    assert model == "Intel(R) Xeon(R) Test Processor"
    assert {"avx512_bf16", "amx_bf16", "avx2"} <= flags and "avx512_bf1" not in flags
    assert cpu_model_and_flags(str(tmp_path / "absent")) == ("unknown", frozenset())


@pytest.mark.parametrize(
    "flags, chosen, said",
    [
        ({"avx512f", "avx512_bf16", "amx_bf16"}, "bf16", "has amx_bf16, avx512_bf16"),
        ({"avx512f", "avx512_bf16"}, "bf16", "has avx512_bf16"),
        ({"avx2", "fma", "avx512f"}, "float32", "has neither amx_bf16 nor avx512_bf16: bf16 would be emulated"),
    ],
)
def test_auto_is_bf16_only_on_a_cpu_with_native_bf16(monkeypatch, flags, chosen, said):
    monkeypatch.setattr(devices, "cpu_model_and_flags", lambda: ("Test CPU", frozenset(flags)))
    precision, reason = devices.auto_precision("cpu")
    assert precision == chosen and reason == f"this CPU (Test CPU) {said}"


def train(corpus: Path, output: Path, precision: str) -> dict:
    argv = ["train", *TINY, "--data", str(corpus), "--steps", "2", "--precision", precision, "--output", str(output)]
    assert main(argv) == 0
    return json.loads((output / "manifest.json").read_text())


@pytest.mark.parametrize("flags, chosen", [({"amx_bf16"}, "bf16"), ({"avx2"}, "float32")])
def test_an_auto_run_is_the_same_work_as_the_precision_it_chose(corpus, tmp_path, monkeypatch, capsys, flags, chosen):
    monkeypatch.setattr(devices, "cpu_model_and_flags", lambda: ("Test CPU", frozenset(flags)))
    auto = train(corpus, tmp_path / "auto", "auto")
    assert f"precision auto: {chosen} (this CPU (Test CPU) has " in capsys.readouterr().out
    assert auto["parameters"]["settings"]["precision"] == chosen
    assert json.loads((tmp_path / "auto/passport.json").read_text())["precision"] == chosen
    named = train(corpus, tmp_path / "named", chosen)
    assert named["id"] == auto["id"]
    other = train(corpus, tmp_path / "other", "float32" if chosen == "bf16" else "bf16")
    assert other["id"] != auto["id"]
