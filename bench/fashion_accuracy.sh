#!/bin/sh
# Fashion-MNIST accuracy table (issue 27): for each epsilon and mechanism,
# RUNS runs of the shipped recipe with fresh (crypto/rand) seeds, each
# evaluated once on the test split; the -json results go to OUT, one file
# per run, and bench/accuracyplot draws them. WALL gets each run's wall
# time, CPU time (user + system, /usr/bin/time) and the load average at
# its end.
#
#   sh bench/fashion_accuracy.sh OUT "3" "dpsgd" 3
#   sh bench/fashion_accuracy.sh OUT "1 3 8" "dpsgd toeplitz:8 blt:4 bandmf:auto" 3
#   go run ./bench/accuracyplot -out docs/fashion-accuracy OUT/*.json
set -e
out=${1:?output directory}
epss=${2:-3}
mechs=${3:-dpsgd}
runs=${4:-3}
mkdir -p "$out"
go build -o "$out/train" ./cmd/train
for eps in $epss; do
	for mech in $mechs; do
		for r in $(seq 1 "$runs"); do
			name=$(echo "eps$eps-$mech-run$r" | tr ':' '_')
			start=$(date +%s)
			GOMAXPROCS=2 /usr/bin/time -f "%U %S" -o "$out/$name.time" "$out/train" run -config configs/fashion-scatternet.json \
				-epsilon "$eps" -mechanism "$mech" -json "$out/$name.json" >"$out/$name.log" 2>&1
			cpu=$(awk '{printf "%.0f", $1 + $2}' "$out/$name.time")
			echo "$name wall $(($(date +%s) - start))s cpu ${cpu}s load $(cut -d' ' -f1 /proc/loadavg)" >>"$out/WALL"
		done
	done
done
