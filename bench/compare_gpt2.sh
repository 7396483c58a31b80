#!/usr/bin/env bash
# Side-by-side training step of a ~10M-parameter GPT-2-shaped model at sequence length 128
# (vocabulary 20000, dimension 256, 4 heads, 6 blocks): dpmf's BenchmarkGPT2Step
# (models/transformer_bench_test.go: private LoRA, non-private LoRA, private full fine-tuning)
# against PyTorch's non-private step on the same model (models/testdata/gpt2/bench_torch.py:
# LoRA with the base frozen, and full), interleaved on the same cores.
#
#   apt-get install -y python3-torch        # Debian's PyTorch 1.13 (CPU)
#   bench/compare_gpt2.sh                   # from the project root
#
# Debian's python3-torch does its matrix products through the reference BLAS (BLAS_INFO=generic,
# under 1 GFLOPS a core); the fair peer is PyTorch on OpenBLAS, which this script loads for the
# PyTorch processes only when TORCH_BLAS names OpenBLAS's libblas.so.3 directory, without
# changing the system's BLAS:
#   (cd /tmp && apt-get download libopenblas0-pthread && dpkg -x libopenblas0-pthread_*.deb ob)
#   TORCH_BLAS=/tmp/ob/usr/lib/x86_64-linux-gnu/openblas-pthread bench/compare_gpt2.sh
#
# Env: BATCH (default 16), ROUNDS (default 2), THREADS (GOMAXPROCS and torch threads, default 2).
# Prints the Go benchmark lines (with the peak RSS of the process) and one JSON line per PyTorch
# run, each preceded by the load average.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=${DPMF:-$(cd "$here/.." && pwd)}
batch=${BATCH:-16}
rounds=${ROUNDS:-2}
threads=${THREADS:-2}
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "python3-torch missing: apt-get install -y python3-torch" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go test -c -o "$tmp/models.test" ./models) || exit 1
for r in $(seq "$rounds"); do
  for mode in lora-private lora-nonprivate full-private; do
    echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
    (cd "$root/models" && DPMF_BENCH_BATCH=$batch GOMAXPROCS=$threads /usr/bin/time -f "# dpmf $mode peak RSS %M KiB" \
      "$tmp/models.test" -test.run '^$' -test.bench "GPT2Step/$mode\$" -test.benchtime 2x 2>&1 | grep -E 'Benchmark|RSS')
  done
  for mode in lora full; do
    echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
    LD_LIBRARY_PATH=${TORCH_BLAS:-} OPENBLAS_NUM_THREADS=$threads THREADS=$threads BATCH=$batch STEPS=2 MODE=$mode \
      $py "$root/models/testdata/gpt2/bench_torch.py"
  done
done
