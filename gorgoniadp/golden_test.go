package gorgoniadp

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/clip/cliptest"
	G "gorgonia.org/gorgonia"
)

// update rewrites the golden files of this package's tests from the
// current code.
var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current code")

// TestClippedSumMatchesPreviousCode compares ClippedSum on the
// per-example path and on the compiled path (flat clipping at an ordinary
// and a tiny norm, L-inf zeroing, non-private) on fixed batches holding
// the extreme examples of cliptest with the previous code's results, bit
// for bit. (Two changes are recorded: the per-example path now counts
// Stats.WithinNorm, through clip.Accumulator, where it reported 0; the
// compiled convolution runs as implicit products (package nn), which sum
// the same terms in another order, so one example of extreme magnitude
// now overflows to a non-finite value and is counted in NonFinite.)
func TestClippedSumMatchesPreviousCode(t *testing.T) {
	var got []string
	kinds := cliptest.Kinds()
	for ci, oc := range opCases[:3] {
		m, err := New(oc.name, oc.build(G.NewGraph(), rand.New(rand.NewPCG(uint64(ci), 1))))
		if err != nil {
			t.Fatal(err)
		}
		chw := oc.shape[0] * oc.shape[1] * oc.shape[2]
		rng := rand.New(rand.NewPCG(uint64(ci), 38))
		const n = 17
		x, y := randomBatch(rng, n, chw, 3)
		for i := 2; i < n; i += 3 {
			cliptest.Corrupt(rng, kinds[(i/3)%len(kinds)], x[i*chw:(i+1)*chw])
		}
		for _, oo := range []struct {
			name string
			opt  clip.Options
		}{
			{"flat", clip.Options{Norm: 0.05, MaxBatch: n}},
			{"flat-tiny", clip.Options{Norm: 1e-12, MaxBatch: n}},
			{"flat-large", clip.Options{Norm: 5, MaxBatch: n}},
			{"linf", clip.Options{Norm: 0.05, LInfZero: 0.3, MaxBatch: n}},
			{"nonprivate", clip.Options{NonPrivate: true, MaxBatch: n}},
		} {
			for _, compiled := range []bool{false, true} {
				e, err := m.Engine(oo.opt)
				if err != nil {
					t.Fatal(err)
				}
				if !compiled {
					e.fast = nil
				} else if e.fast == nil {
					continue
				}
				sum := make([]float32, m.NumParams())
				st, err := e.ClippedSum(x, y, sum)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, cliptest.Golden(fmt.Sprintf("%s/%s/compiled=%v", oc.name, oo.name, compiled), sum, st))
			}
		}
	}
	cliptest.CheckGolden(t, "testdata/clippedsum.golden", true, got, *update)
}
