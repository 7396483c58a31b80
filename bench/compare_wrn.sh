#!/usr/bin/env bash
# Side-by-side throughput of WideResNet-16-4 with GroupNorm(16) (2,751,146 parameters, 32x32x3):
# dpmf's BenchmarkWRN16x4 (clip/bench_test.go) against the same network in PyTorch
# (clip/testdata/wrn_torch.py: non-private SGD, and functorch vmap(grad) with clipping and noise),
# interleaved on the same cores so that both see the same machine load.
#
#   apt-get install -y python3-torch        # Debian's PyTorch 1.13 (CPU, oneDNN)
#   bench/compare_wrn.sh                    # from the project root
#
# Env: BATCHES (default "16 32 64"), ROUNDS (default 3), STEPS (timed steps per run, default 3),
# THREADS (GOMAXPROCS and torch threads, default 2). Each round runs, for every batch size, one
# process per program and mode: dpmf private, PyTorch vmap, dpmf non-private, PyTorch non-private,
# with the two programs' order swapped every other round. Prints the Go benchmark lines and one
# JSON line per PyTorch run as they come, then a markdown table of the medians over the rounds
# (examples/s wall, CPU ms per example, peak RSS of each process).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=${DPMF:-$(cd "$here/.." && pwd)}
steps=${STEPS:-3}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
py=/usr/bin/python3
$py -c 'import torch' 2>/dev/null || { echo "python3-torch missing: apt-get install -y python3-torch" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go test -c -o "$tmp/clip.test" ./clip) || exit 1
res="$tmp/results.tsv"   # program mode batch ex/s cpu-ms/example maxrss-MiB

ours() { # batch private(true|false)
  local out
  out=$(cd "$root/clip" && DPMF_BENCH_BATCHES=$1 GOMAXPROCS=$threads "$tmp/clip.test" -test.run XXX \
      -test.bench "WRN16x4/batch=$1/private=$2\$" -test.benchtime "${steps}x" 2>&1 | grep -E '^Benchmark|FAIL')
  echo "$out"
  local mode=nonprivate; [ "$2" = true ] && mode=private
  echo "$out" | awk -v mode=$mode -v b="$1" '/^Benchmark/ {
      for (i = 1; i < NF; i++) { if ($(i+1) == "examples/s") e = $i; if ($(i+1) == "examples/cpu-s") c = $i; if ($(i+1) == "maxRSS-MiB") r = $i }
      printf "dpmf\t%s\t%s\t%s\t%s\t%s\n", mode, b, e, 1000 / c, r }' >> "$res"
}

theirs() { # batch mode(vmap|nonprivate)
  local out
  out=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/time -f "maxrss_kb=%M" \
      $py "$root/clip/testdata/wrn_torch.py" --modes "$2" --batch "$1" --steps "$steps" --threads "$threads" 2>&1)
  echo "$out" | grep -E '"mode"|maxrss_kb|Error'
  echo "$out" | $py -c '
import json, re, sys
j, rss = None, None
for line in sys.stdin:
    if line.startswith("{"): j = json.loads(line)
    m = re.search(r"maxrss_kb=(\d+)", line)
    if m: rss = int(m.group(1)) / 1024
if j and rss:
    print("torch\t%s\t%d\t%s\t%s\t%s" % (j["mode"], j["batch"], j["ex_per_s_median"], j["cpu_ms_per_example"], rss))
' >> "$res"
}

for r in $(seq 1 "$rounds"); do
  echo "# round $r of $rounds"
  for b in ${BATCHES:-16 32 64}; do
    if [ $((r % 2)) -eq 1 ]; then
      ours "$b" true; theirs "$b" vmap; ours "$b" false; theirs "$b" nonprivate
    else
      theirs "$b" vmap; ours "$b" true; theirs "$b" nonprivate; ours "$b" false
    fi
  done
done

echo
echo "WRN-16-4, $threads threads, $rounds rounds of $steps steps, medians; commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null); $(date -u '+%Y-%m-%d %H:%M UTC'); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
$py - "$res" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    prog, mode, b, ex, cpu, rss = line.split("\t")
    runs[(prog, mode, int(b))].append((float(ex), float(cpu), float(rss)))
def med(k, i):
    v = [r[i] for r in runs.get(k, [])]
    return statistics.median(v) if v else float("nan")
print("| batch | dpmf private ex/s | PyTorch vmap ex/s | private / vmap | dpmf non-private ex/s | PyTorch non-private ex/s | non-private / PyTorch | CPU ms/example: dpmf private / vmap | peak RSS MiB: dpmf private / vmap |")
print("|---|---|---|---|---|---|---|---|---|")
for b in sorted({k[2] for k in runs}):
    dp, tv = ("dpmf", "private", b), ("torch", "vmap", b)
    dn, tn = ("dpmf", "nonprivate", b), ("torch", "nonprivate", b)
    print("| %d | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %.1f / %.1f | %.0f / %.0f |" % (
        b, med(dp, 0), med(tv, 0), med(dp, 0) / med(tv, 0), med(dn, 0), med(tn, 0), med(dn, 0) / med(tn, 0),
        med(dp, 1), med(tv, 1), med(dp, 2), med(tv, 2)))
EOF
