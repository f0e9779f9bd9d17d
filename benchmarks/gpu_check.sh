#!/usr/bin/env bash
# One-GPU check of the performance claims, in under 8 minutes on one H100/H200:
#   1. gpt2-small training throughput, bf16 + torch.compile, ours against Hugging Face's GPT2LMHeadModel
#      (tokens/s, ratio, peak memory, MFU against the device's dense bf16 peak);
#   2. the matched comparison on CUDA in strict float32 (no TF32), random gpt2-small weights;
#   3. the KV-cache benchmark at gpt2-small size.
# Results go to $OUT (default gpu_check_out/): one JSON per step, plus the console log.
#
#   bash benchmarks/gpu_check.sh                  # on a GPU machine
#   DEVICE=cpu SMOKE=1 bash benchmarks/gpu_check.sh   # the same steps, tiny sizes, on a CPU (minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check_out}
DEVICE=${DEVICE:-cuda}
SMOKE=${SMOKE:-0}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu_check.log") 2>&1

if [[ "$SMOKE" == 1 ]]; then
    # Tiny sizes: checks that every step runs end to end, measures nothing worth quoting.
    THROUGHPUT=(--config gpt2-small --batch 1 --context 64 --warmup 1 --steps 1 --rounds 1 --precision float32)
    MATCHED=(--preset quick --updates 3 --batch 2 --eval-every 0 --eval-batches 1)
    CACHE=(--preset quick --prompt-tokens 8 --generate 8)
else
    THROUGHPUT=(--config gpt2-small --batch 16 --warmup 6 --steps 12 --rounds 1 --precision bf16 --compile --loss-chunk 2048)
    MATCHED=(--preset gpt2-small --updates 30 --batch 8 --eval-every 10 --eval-batches 2)
    CACHE=(--preset gpt2-small --prompt-tokens 32 --generate 128)
fi

echo "== $(date -u +%FT%TZ) on $(hostname); device $DEVICE"
python - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
PY
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv || true

echo "== 1. training throughput (ours vs Hugging Face)"
python benchmarks/train_throughput.py "${THROUGHPUT[@]}" --device "$DEVICE" --json "$OUT/throughput.json"

echo "== 2. matched comparison, strict float32"
rm -rf "$OUT/corpus" "$OUT/matched" "$OUT/cache_bench"
gptlineage prepare --input data/shakespeare/plays.jsonl.gz --max-documents 60 --validation-fraction 0.1 \
    --output "$OUT/corpus" > "$OUT/prepare.log"
gptlineage matched-compare --random-init "${MATCHED[@]}" --precision float32 --device "$DEVICE" \
    --data "$OUT/corpus" --output "$OUT/matched"

echo "== 3. KV-cache benchmark"
gptlineage cache-bench --random-init "${CACHE[@]}" --device "$DEVICE" --output "$OUT/cache_bench"

echo "== done $(date -u +%FT%TZ); results in $OUT"
