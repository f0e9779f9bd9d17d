"""benchmarks/train_throughput.py's interleaved mode at tiny sizes, with a stand-in nanoGPT checkout.

The stand-in `model.py` written here has nanoGPT's interface (GPTConfig, GPT(config),
forward(idx, targets) -> (logits, loss), configure_optimizers) and parameter names, so the
benchmark loads our weights into it as it would into the real one; no network, no real checkout.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent

STAND_IN_MODEL = """
from dataclasses import dataclass
import torch
import torch.nn as nn
import torch.nn.functional as F

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.n_head = c.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(c.n_embd), nn.LayerNorm(c.n_embd)
        self.attn = nn.Module()
        self.attn.c_attn, self.attn.c_proj = nn.Linear(c.n_embd, 3 * c.n_embd), nn.Linear(c.n_embd, c.n_embd)
        self.mlp = nn.Module()
        self.mlp.c_fc, self.mlp.c_proj = nn.Linear(c.n_embd, 4 * c.n_embd), nn.Linear(4 * c.n_embd, c.n_embd)

    def forward(self, x):
        b, t, w = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(w, dim=2)
        q, k, v = (z.view(b, t, self.n_head, -1).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, w)
        x = x + self.attn.c_proj(y)
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        print("number of parameters: (the real one prints this too)")
        c = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
            h=nn.ModuleList(Block(c) for _ in range(c.n_layer)), ln_f=nn.LayerNorm(c.n_embd)))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1])
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)
"""


@pytest.fixture
def throughput(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import train_throughput

    threads = torch.get_num_threads()
    yield train_throughput
    torch.set_num_threads(threads)  # the benchmark sets the process's thread count


def run_benchmark(throughput, monkeypatch, capsys, *flags: str) -> tuple[dict, str]:
    out = Path(flags[flags.index("--json") + 1])
    monkeypatch.setattr(sys, "argv", ["train_throughput.py", *flags])
    throughput.main()
    return json.loads(out.read_text()), capsys.readouterr().out


def test_interleaved_mode_steps_every_trainer_from_the_same_weights(throughput, monkeypatch, capsys, tmp_path):
    checkout = tmp_path / "nanoGPT"
    checkout.mkdir()
    (checkout / "model.py").write_text(textwrap.dedent(STAND_IN_MODEL))
    summary, printed = run_benchmark(
        throughput,
        monkeypatch,
        capsys,
        *("--batch", "1", "--context", "16", "--warmup", "1", "--steps", "3", "--threads", "1"),
        *("--interleaved", "--nanogpt-dir", str(checkout), "--json", str(tmp_path / "out.json")),
    )
    assert summary["mode"] == "interleaved"
    assert list(summary["arms"]) == ["ours", "peer", "nanogpt"]
    losses = {arm: entry["first_loss"] for arm, entry in summary["arms"].items()}
    assert losses["peer"] == pytest.approx(losses["ours"], abs=1e-4)  # the same weights and batch
    assert losses["nanogpt"] == pytest.approx(losses["ours"], abs=1e-4)
    assert all(entry["steps_timed"] == 3 and "peak_memory_mib" not in entry for entry in summary["arms"].values())
    assert set(summary["ratios_tokens_per_second"]) == {"peer", "nanogpt"}
    assert summary["ratio_tokens_per_second"] == summary["ratios_tokens_per_second"]["peer"] > 0
    assert 0 < summary["arms"]["ours"]["mfu"] < 1.5 and summary["peak_tflops"] > 0  # against the probe
    assert "(median of per-step ratios): ours/peer" in printed and "ours/nanogpt" in printed


def test_a_bf16_interleaved_run_steps_our_float32_trainer_beside_the_others(throughput, monkeypatch, capsys, tmp_path):
    summary, printed = run_benchmark(
        throughput,
        monkeypatch,
        capsys,
        *("--batch", "1", "--context", "16", "--warmup", "1", "--steps", "2", "--threads", "1", "--precision", "bf16"),
        *("--interleaved", "--peak-tflops", "1", "--json", str(tmp_path / "out.json")),
    )
    assert list(summary["arms"]) == ["ours", "peer", "ours-fp32"]
    assert set(summary["ratios_tokens_per_second"]) == {"peer", "ours-fp32"}
    bf16, float32 = summary["arms"]["ours"]["first_loss"], summary["arms"]["ours-fp32"]["first_loss"]
    assert bf16 != float32 and bf16 == pytest.approx(float32, abs=0.05)  # the same batch, bf16 rounding
    assert summary["cpu"] == throughput.cpu_description() and f"cpu: {summary['cpu']}" in printed
    assert "ours/ours-fp32 " in printed


def test_a_nanogpt_dir_without_model_py_is_one_line(throughput, monkeypatch, tmp_path):
    monkeypatch.setattr(
        sys,
        "argv",
        ["train_throughput.py", "--interleaved", "--nanogpt-dir", str(tmp_path), "--peak-tflops", "1"],
    )
    with pytest.raises(SystemExit, match=f"--nanogpt-dir {tmp_path}: no model.py there"):
        throughput.main()


def test_lineage_scale_runs_every_part_at_tiny_sizes(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))
    import lineage_scale

    result = lineage_scale.main(
        [
            *("--rounds", "1", "--total-mib", "4", "--files", "2", "--single-mib", "2"),
            *("--model", "16", "1", "64", "8", "--sizes", "8"),
            *("--scratch", str(tmp_path), "--json", str(tmp_path / "out.json")),
        ]
    )
    assert json.loads((tmp_path / "out.json").read_text()) == result
    assert result["verify"]["multi"]["files"] == 2 and result["verify"]["single"]["files"] == 1
    assert all(rate > 0 for rate in result["verify"]["multi"]["mib_per_s"].values())
    assert result["write"]["seconds"]["old"] > 0 and result["write"]["seconds"]["new"] > 0
    assert [(row["shape"], row["artifacts"]) for row in result["scale"]] == [("chain", 8), ("wide", 8), ("diamonds", 7)]
    assert all(row["most_reads_of_one_manifest"] == {"show": 1, "diff": 1} for row in result["scale"])
    assert list(tmp_path.iterdir()) == [tmp_path / "out.json"]  # the scratch trees are removed


def test_the_step_profile_names_each_trainers_costliest_ops_and_the_matmul_bound(throughput, monkeypatch, capsys):
    import profile_step

    flags = ("--batch", "1", "--context", "16", "--warmup", "1", "--steps", "2", "--threads", "1")
    monkeypatch.setattr(sys, "argv", ["profile_step.py", *flags])
    profile_step.main()
    printed = capsys.readouterr().out
    for arm in ("ours", "peer"):
        assert f"{arm}: median step " in printed and "ms/step" in printed
    share = float(printed.split("ours: median step ")[1].split("matrix multiplies ")[1].split("%")[0])
    assert 0 < share < 100 and "with only its matrix multiplies, ours would be " in printed
