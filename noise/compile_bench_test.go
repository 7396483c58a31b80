package noise

import (
	"testing"
)

// BenchmarkLiveCompile compiles the step programs of the 2048-step online
// tree's G (sparse, with merging of proportional futures): the one-time
// cost of building a live source, and its allocations.
func BenchmarkLiveCompile(b *testing.B) {
	const n = 2048
	f := treeFact(b, prefixW(b, n), false)
	g, err := workloadSolve(f.Workload, f.Decoder)
	if err != nil {
		b.Fatal(err)
	}
	lc, _, err := newLiveCols(g)
	if err != nil {
		b.Fatal(err)
	}
	store := lc.multiUse()
	for _, merge := range []bool{false, true} {
		name := "merge=false"
		if merge {
			name = "merge=true"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				lc.compile(store, merge)
			}
		})
	}
}
