"""The lineage at checkpoint scale: verify against sha256sum, write-time hashing, 10,000 artifacts.

Three parts, each printed as it finishes (and all of them with `--json FILE`):

- verify: `lineage verify` (in-process) of an artifact holding N random safetensors-sized files
  (default 8 files, 2 GiB in all) and of one holding one file, against `sha256sum` of the same
  files (one process: the single-stream limit), `openssl dgst -sha256` (OpenSSL's one stream,
  where installed) and `cat FILES > /dev/null` (the read rate; the
  page cache is warm, nothing is dropped), in interleaved rounds; each ratio is the median of
  the per-round ratios. `verify, 1 CPU` is the same verify under OMP_NUM_THREADS=1.
- write: a checkpoint's tensor files at gpt2-small's shapes (parameters, and the optimizer's two
  moments) written the old way (safetensors' save_file, then sha256_file reads it back) and the
  new way (serialized in memory, hashed as written; the digest then comes from the hash session).
- scale: synthetic trees of 100, 1,000 and 10,000 artifacts (a chain; a wide DAG, one shared
  parent under every child; a row of diamonds), timing `lineage verify`, `show`, `diff` (against a
  tree whose root has another parameter, so every stage differs) and `table --stage` in-process,
  with the time per artifact (flat when the cost is linear) and the most times any one
  artifact's manifest was read by show's walk and by diff's (1: no shared ancestor revisited).

Example:
    python benchmarks/lineage_scale.py                                 # everything, ~2 GiB of files
    python benchmarks/lineage_scale.py --parts verify --total-mib 8192 --files 16
    python benchmarks/lineage_scale.py --parts scale --sizes 100 1000 10000 --json scale.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

from lineage_trees import build_tree, template

FLAGS = ("sha_ni", "avx2", "avx512f", "vaes")  # what decides OpenSSL's sha256 speed


def header() -> dict:
    """The CPU model and its hashing flags, CPUs available, OpenSSL: the machine the figures are from."""
    from gptlineage.core.cpus import available_cpus, cpu_model_and_flags

    model, flags = cpu_model_and_flags()
    return {
        "cpu": model,
        "cpu_flags": [flag for flag in FLAGS if flag in flags],
        "cpus_available": available_cpus(),
        "openssl": ssl.OPENSSL_VERSION,
        "python": platform.python_version(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def quiet(function, *args):
    """Call FUNCTION with stdout captured: the commands print thousands of lines."""
    with contextlib.redirect_stdout(io.StringIO()):
        return function(*args)


def timed(function, *args) -> float:
    start = time.perf_counter()
    function(*args)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- verify vs sha256sum


def random_artifact(output: Path, files: int, mib_each: int) -> list[Path]:
    """An artifact of FILES random files of MIB_EACH MiB; their paths."""
    from gptlineage.lineage.artifact import ArtifactWriter

    with ArtifactWriter(output, command="test", parameters={"files": files, "mib": mib_each}) as artifact:
        for index in range(files):
            with open(artifact.path / f"shard-{index:03d}.safetensors", "wb") as handle:
                for _ in range(mib_each):
                    handle.write(os.urandom(1 << 20))
    return sorted(output.glob("*.safetensors"))


def verify_rounds(artifact: Path, files: list[Path], rounds: int) -> dict:
    """Interleaved rounds of verify (all CPUs, then one), sha256sum and cat; medians and ratios."""
    from gptlineage.cli import main

    def verify_with(threads: str | None) -> None:
        saved = dict(os.environ)
        os.environ.update({} if threads is None else {"OMP_NUM_THREADS": threads})
        try:
            assert quiet(main, ["lineage", "verify", str(artifact)]) == 0
        finally:
            os.environ.clear()
            os.environ.update(saved)

    names = [str(path) for path in files]
    arms = {
        "verify": lambda: verify_with(None),
        "verify_1cpu": lambda: verify_with("1"),
        "sha256sum": lambda: subprocess.run(["sha256sum", *names], check=True, capture_output=True),
        "cat": lambda: subprocess.run(f"cat {' '.join(names)} > /dev/null", shell=True, check=True),
    }
    if shutil.which("openssl"):  # OpenSSL's own single stream (coreutils' sha256sum has no SHA-NI code)
        arms["openssl"] = lambda: subprocess.run(
            ["openssl", "dgst", "-sha256", *names], check=True, capture_output=True
        )
    arms["cat"]()  # warm the page cache once
    seconds: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(rounds):
        for arm, run in arms.items():
            seconds[arm].append(timed(run))
    total = sum(path.stat().st_size for path in files) / (1 << 20)
    return {
        "files": len(files),
        "mib": total,
        "seconds": {arm: statistics.median(values) for arm, values in seconds.items()},
        "mib_per_s": {arm: total / statistics.median(values) for arm, values in seconds.items()},
        "ratio_vs_sha256sum": statistics.median(s / v for s, v in zip(seconds["sha256sum"], seconds["verify"])),
        "ratio_1cpu_vs_sha256sum": statistics.median(
            s / v for s, v in zip(seconds["sha256sum"], seconds["verify_1cpu"])
        ),
        "parallel_speedup": statistics.median(one / v for one, v in zip(seconds["verify_1cpu"], seconds["verify"])),
        "ratio_vs_openssl": (
            statistics.median(s / v for s, v in zip(seconds["openssl"], seconds["verify"]))
            if "openssl" in arms
            else None
        ),
    }


def verify_part(args, scratch: Path) -> dict:
    mib_each = max(1, args.total_mib // args.files)
    multi = random_artifact(scratch / "multi", args.files, mib_each)
    single = random_artifact(scratch / "single", 1, args.single_mib)
    return {
        "multi": verify_rounds(scratch / "multi", multi, args.rounds),
        "single": verify_rounds(scratch / "single", single, args.rounds),
    }


# --------------------------------------------------------------------------- checkpoint write time


def gpt2_tensors(width: int, layers: int, vocab: int, context: int) -> dict:
    """Random float32 tensors of a GPT-2 state dict's shapes (gpt2-small: 768, 12, 50257, 1024)."""
    import torch

    shapes = {"wte": (vocab, width), "wpe": (context, width), "ln_f.weight": (width,), "ln_f.bias": (width,)}
    per_layer = {"ln_1": [(width,)] * 2, "ln_2": [(width,)] * 2, "attn.c_attn": [(width, 3 * width), (3 * width,)]}
    per_layer |= {"attn.c_proj": [(width, width), (width,)], "mlp.c_fc": [(width, 4 * width), (4 * width,)]}
    per_layer |= {"mlp.c_proj": [(4 * width, width), (width,)]}
    for layer in range(layers):
        for name, (weight, bias) in per_layer.items():
            shapes[f"h.{layer}.{name}.weight"], shapes[f"h.{layer}.{name}.bias"] = weight, bias
    generator = torch.Generator().manual_seed(0)
    return {name: torch.randn(shape, generator=generator) for name, shape in shapes.items()}


def write_old(directory: Path, files: dict) -> None:
    """The path before: safetensors writes the file, then sha256_file reads it back."""
    from safetensors.torch import save_file

    from gptlineage.lineage.hashing import sha256_file
    from gptlineage.model.parameters import fsync_path

    for name, tensors in files.items():
        save_file(tensors, str(directory / name), metadata={"schema": "bench"})
        fsync_path(directory / name)
        sha256_file(directory / name)


def write_new(directory: Path, files: dict) -> None:
    """The path now: serialized in memory, hashed as written; the digest is the session's."""
    from gptlineage.lineage.hashing import hash_session, sha256_file
    from gptlineage.model.parameters import write_safetensors

    with hash_session():
        for name, tensors in files.items():
            write_safetensors(directory / name, tensors, {"schema": "bench"})
            sha256_file(directory / name)


def write_part(args, scratch: Path) -> dict:
    parameters = gpt2_tensors(*args.model)
    files = {
        "parameters.safetensors": parameters,
        "optimizer.safetensors": {
            f"{name}.{moment}": tensor.clone() for name, tensor in parameters.items() for moment in ("m", "v")
        },
    }
    mib = sum(t.numel() * 4 for group in files.values() for t in group.values()) / (1 << 20)
    seconds: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.rounds):
        for arm, write in (("old", write_old), ("new", write_new)):
            directory = scratch / f"ckpt-{arm}"
            directory.mkdir(exist_ok=True)
            seconds[arm].append(timed(write, directory, files))
            shutil.rmtree(directory)
    medians = {arm: statistics.median(values) for arm, values in seconds.items()}
    return {"mib": mib, "seconds": medians, "speedup": medians["old"] / medians["new"]}


# --------------------------------------------------------------------------- synthetic trees


def visits(module, function, *args) -> int:
    """The most times FUNCTION read any one manifest through MODULE.read_manifest."""
    counts: Counter = Counter()
    real = module.read_manifest

    def counting(directory):
        counts[str(directory)] += 1
        return real(directory)

    module.read_manifest = counting
    try:
        quiet(function, *args)
    finally:
        module.read_manifest = real
    return max(counts.values())


def scale_one(base: dict, scratch: Path, shape: str, count: int) -> dict:
    from gptlineage.cli import main
    from gptlineage.lineage import diff, walk

    top_a = build_tree(base, scratch / f"{shape}-{count}-a", shape, count, seed=0)
    top_b = build_tree(base, scratch / f"{shape}-{count}-b", shape, count, seed=1)
    artifacts = sum(1 for _ in walk.walk(top_a))
    commands = {
        "verify": ["lineage", "verify", str(top_a)],
        "show": ["lineage", "show", str(top_a)],
        "diff": ["lineage", "diff", str(top_a), str(top_b), "--json"],
        "table": ["lineage", "table", str(scratch / f"{shape}-{count}-a"), "--stage", "node", "--json"],
    }
    seconds = {name: timed(quiet, main, argv) for name, argv in commands.items()}
    return {
        "shape": shape,
        "artifacts": artifacts,
        "seconds": seconds,
        "us_per_artifact": {name: 1e6 * value / artifacts for name, value in seconds.items()},
        "most_reads_of_one_manifest": {
            "show": visits(walk, walk.show_lines, top_a),
            "diff": visits(diff, diff.stages, top_a),
        },
    }


def scale_part(args, scratch: Path) -> list[dict]:
    base = template(scratch)
    scale_one(base, scratch / "warm-up", "diamonds", 4)  # the commands' first call imports their modules
    rows = []
    for count in args.sizes:
        for shape in args.shapes:
            rows.append(scale_one(base, scratch, shape, count))
            print_scale(rows[-1])
    return rows


# --------------------------------------------------------------------------- output


def print_verify(kind: str, result: dict) -> None:
    rates = ", ".join(f"{arm} {rate:.0f} MiB/s" for arm, rate in result["mib_per_s"].items())
    print(
        f"verify {kind} ({result['files']} files, {result['mib']:.0f} MiB): {rates};"
        f" verify/sha256sum {result['ratio_vs_sha256sum']:.2f}x (1 CPU {result['ratio_1cpu_vs_sha256sum']:.2f}x),"
        f" verify/openssl {result['ratio_vs_openssl'] or 0:.2f}x, all CPUs/1 CPU {result['parallel_speedup']:.2f}x",
        flush=True,
    )


def print_scale(row: dict) -> None:
    times = ", ".join(
        f"{name} {row['seconds'][name]:.2f} s ({row['us_per_artifact'][name]:.0f} us/artifact)"
        for name in row["seconds"]
    )
    reads = row["most_reads_of_one_manifest"]
    print(
        f"scale {row['shape']:8} {row['artifacts']:6d} artifacts: {times};"
        f" most reads of one manifest: show {reads['show']}, diff {reads['diff']}",
        flush=True,
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parts, shapes = ("verify", "write", "scale"), ("chain", "wide", "diamonds")
    parser.add_argument("--parts", nargs="+", choices=parts, default=list(parts))
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of verify and write")
    parser.add_argument("--total-mib", type=int, default=2048, help="the multi-file tree's size")
    parser.add_argument("--files", type=int, default=8, help="how many files the multi-file tree holds")
    parser.add_argument("--single-mib", type=int, default=1024, help="the single file's size")
    parser.add_argument(
        "--model", type=int, nargs=4, default=[768, 12, 50257, 1024], metavar=("WIDTH", "LAYERS", "VOCAB", "CONTEXT")
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000], help="artifacts per tree")
    parser.add_argument("--shapes", nargs="+", choices=shapes, default=list(shapes))
    parser.add_argument("--scratch", type=Path, help="where to write (default a temporary directory, removed)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    result = {"header": header()}
    print(json.dumps(result["header"]), flush=True)
    if args.scratch:
        Path(args.scratch).mkdir(parents=True, exist_ok=True)  # the temporary folder goes inside it
    with tempfile.TemporaryDirectory(dir=args.scratch) as scratch:
        if "verify" in args.parts:
            result["verify"] = verify_part(args, Path(scratch))
            for kind in ("multi", "single"):
                print_verify(kind, result["verify"][kind])
        if "write" in args.parts:
            result["write"] = write_part(args, Path(scratch))
            written = result["write"]
            print(
                f"checkpoint write ({written['mib']:.0f} MiB): old (write, read back) {written['seconds']['old']:.2f} s,"
                f" new (hashed as written) {written['seconds']['new']:.2f} s, {written['speedup']:.2f}x",
                flush=True,
            )
        if "scale" in args.parts:
            result["scale"] = scale_part(args, Path(scratch))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
