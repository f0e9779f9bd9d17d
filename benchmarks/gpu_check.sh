#!/usr/bin/env bash
# One-GPU check of the performance claims, in under 8 minutes on one H100/H200:
#   0. preflight: install the project into a fresh virtual environment (as .ci/run does), check that
#      torch sees the device, and print it (model, capability, memory, torch/CUDA/cuDNN versions);
#   1. gpt2-small training throughput, bf16 + torch.compile, ours against Hugging Face's GPT2LMHeadModel
#      (tokens/s, ratio, peak memory, MFU against the data-sheet dense bf16 peak of the device's model);
#   2. the matched comparison on CUDA in strict float32 (no TF32), random gpt2-small weights;
#   3. the KV-cache benchmark at gpt2-small size;
#   4. decoding: our cached and full-prefix decoders against Hugging Face generate at gpt2-small size,
#      and the 40-prompt suite decoded in one batch against one prompt at a time (decode_throughput.py).
# Results go to $OUT (default gpu_check_out/): one JSON per step, plus the console log.
#
#   bash benchmarks/gpu_check.sh                      # on a GPU machine
#   DEVICE=cpu SMOKE=1 bash benchmarks/gpu_check.sh   # the same steps, tiny sizes, on a CPU
#
# STEPS picks the steps to run (default "0 1 2 3 4"). INSTALL=0 skips the fresh environment and uses
# the python on PATH (the test suite does: an install takes minutes); SYSTEM_SITE_PACKAGES=1 lets the
# fresh environment see this machine's packages, for a GPU node without network access that already
# has a CUDA build of torch. NANOGPT_DIR=<a karpathy/nanoGPT checkout> adds its model.py as a second peer
# in step 1, and step 1 then also runs the interleaved mode (all trainers in one process, stepped in
# turn, median of per-step ratios) after the per-process run that measures peak memory.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
DEVICE=${DEVICE:-cuda}
SMOKE=${SMOKE:-0}
INSTALL=${INSTALL:-1}
SYSTEM_SITE_PACKAGES=${SYSTEM_SITE_PACKAGES:-0}
NANOGPT_DIR=${NANOGPT_DIR:-}
STEPS=" ${STEPS:-0 1 2 3 4} "
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1

if [[ "$SMOKE" == 1 ]]; then
    # Tiny sizes: checks that every step runs end to end, measures nothing worth quoting.
    THROUGHPUT=(--config bench-cpu --batch 1 --context 32 --warmup 0 --steps 1 --rounds 1 --precision float32 --peak-tflops 1)
    MATCHED=(--preset quick --updates 2 --batch 2 --eval-every 0 --eval-batches 1)
    CACHE=(--preset quick --prompt-tokens 4 --generate 4)
    DECODE=(--config tiny --runs 1 --warmup 0 --prompt-tokens 8 --generate 8)
    SUITE=(--config tiny --suite 4 --generate 4 --runs 1 --warmup 0)
else
    THROUGHPUT=(--config gpt2-small --batch 16 --warmup 6 --steps 12 --rounds 1 --precision bf16 --compile --loss-chunk 2048)
    MATCHED=(--preset gpt2-small --updates 30 --batch 8 --eval-every 10 --eval-batches 2)
    CACHE=(--preset gpt2-small --prompt-tokens 32 --generate 128)
    DECODE=(--config gpt2-small --runs 3)
    SUITE=(--config gpt2-small --suite 40 --runs 2)
fi

preflight() {
    echo "== 0. preflight"
    if [[ "$INSTALL" == 1 ]]; then
        venv="$(mktemp -d)/venv"
        site=()
        if [[ "$SYSTEM_SITE_PACKAGES" == 1 ]]; then
            site=(--system-site-packages)
        fi
        python3 -m venv "${site[@]}" "$venv"
        . "$venv/bin/activate"
        python -m pip install --quiet --upgrade pip
        python -m pip install --quiet -e .
        echo "installed into $venv"
    fi
    DEVICE="$DEVICE" python - <<'PY'
import os
import sys

import torch

device = os.environ["DEVICE"]
cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", cudnn)
if device.startswith("cuda"):
    if not torch.cuda.is_available():
        sys.exit(
            f"error: gpu_check: DEVICE={device} but torch.cuda.is_available() is False"
            f" (torch {torch.__version__}, built for CUDA {torch.version.cuda}); is there a GPU and its driver?"
        )
    index = torch.device(device).index or 0
    gpu = torch.cuda.get_device_properties(index)
    print(
        f"device {device}: {gpu.name}, compute capability {gpu.major}.{gpu.minor},"
        f" {gpu.total_memory / 2**30:.1f} GiB, {torch.cuda.device_count()} GPU(s) visible"
    )
else:
    print(f"device {device}: no GPU used ({torch.get_num_threads()} torch threads)")
PY
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    fi
}

throughput() {
    echo "== 1. training throughput (ours vs Hugging Face${NANOGPT_DIR:+ and nanoGPT})"
    peers=()
    if [[ -n "$NANOGPT_DIR" ]]; then
        peers=(--nanogpt-dir "$NANOGPT_DIR")
    fi
    python benchmarks/train_throughput.py "${THROUGHPUT[@]}" "${peers[@]}" --device "$DEVICE" --json "$OUT/throughput.json"
    if [[ -n "$NANOGPT_DIR" ]]; then
        python benchmarks/train_throughput.py "${THROUGHPUT[@]}" "${peers[@]}" --interleaved --device "$DEVICE" \
            --json "$OUT/throughput_interleaved.json"
    fi
}

matched() {
    echo "== 2. matched comparison, strict float32"
    rm -rf "$OUT/corpus" "$OUT/matched"
    python -m gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 60 \
        --validation-fraction 0.1 --output "$OUT/corpus" > "$OUT/prepare.log"
    python -m gptlineage matched-compare --random-init "${MATCHED[@]}" --precision float32 --device "$DEVICE" \
        --data "$OUT/corpus" --output "$OUT/matched"
}

cache() {
    echo "== 3. KV-cache benchmark"
    rm -rf "$OUT/cache_bench"
    python -m gptlineage cache-bench --random-init "${CACHE[@]}" --device "$DEVICE" --output "$OUT/cache_bench"
}

decode() {
    echo "== 4. decoding against Hugging Face generate; the prompt suite batched"
    python benchmarks/decode_throughput.py "${DECODE[@]}" --device "$DEVICE" --json "$OUT/decode.json"
    python benchmarks/decode_throughput.py "${SUITE[@]}" --device "$DEVICE" --json "$OUT/decode_suite.json"
}

echo "== $(date -u +%FT%TZ) on $(hostname); device $DEVICE; steps$STEPS"
step=0
for name in preflight throughput matched cache decode; do
    if [[ "$STEPS" == *" $step "* ]]; then
        "$name"
    fi
    step=$((step + 1))
done
echo "== done $(date -u +%FT%TZ); results in $OUT"
