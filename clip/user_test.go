package clip

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestUserClippedSumMatchesReference checks UserClippedSum against a
// float64 reference built from the executor's per-example gradients: each
// user's gradients summed (or averaged) exactly, clipped once to zeta,
// added over users. Every user's own contribution (a batch of that user
// alone) has norm at most zeta exactly, whatever its number of examples.
func TestUserClippedSumMatchesReference(t *testing.T) {
	for _, tm := range testModels() {
		if tm.noFD {
			continue
		}
		for _, mean := range []bool{false, true} {
			m, err := tm.mk()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 11))
			groups := []int{1, 3, 5, 2, 7, 1}
			n := 0
			for _, g := range groups {
				n += g
			}
			const zeta = 0.05
			e, err := New(m, Options{Norm: zeta, MaxBatch: n})
			if err != nil {
				t.Fatal(err)
			}
			in := m.InputShape()
			x, y := randBatch(rng, n, in[0]*in[1]*in[2], m.Classes())
			g := perExample(t, e, x, y)
			want := make([]float64, m.NumParams())
			lo := 0
			for _, k := range groups {
				u := make([]float64, len(want))
				for j := lo; j < lo+k; j++ {
					for i, v := range g[j] {
						u[i] += float64(v)
					}
				}
				if mean {
					for i := range u {
						u[i] /= float64(k)
					}
				}
				s := 0.0
				for _, v := range u {
					s += v * v
				}
				c := math.Min(1, zeta/math.Sqrt(s))
				for i, v := range u {
					want[i] += c * v
				}
				// The user alone: its contribution's norm is at most zeta.
				one := make([]float32, len(want))
				if _, err := e.UserClippedSum(x[lo*e.chw:(lo+k)*e.chw], y[lo:lo+k], []int{k}, UserOptions{Mean: mean}, one); err != nil {
					t.Fatal(err)
				}
				if nr := norm32(one); nr > zeta {
					t.Errorf("%s: user of %d examples contributes norm %.10g > zeta %g", tm.name, k, nr, zeta)
				}
				lo += k
			}
			got := make([]float32, len(want))
			st, err := e.UserClippedSum(x, y, groups, UserOptions{Mean: mean}, got)
			if err != nil {
				t.Fatal(err)
			}
			d, w := 0.0, 0.0
			for i := range want {
				d += (float64(got[i]) - want[i]) * (float64(got[i]) - want[i])
				w += want[i] * want[i]
			}
			// float32 gradients and sum: a few ulps of float32.
			if r := math.Sqrt(d / w); r > 1e-5 {
				t.Errorf("%s mean=%v: relative error %.3g against the float64 reference", tm.name, mean, r)
			}
			if st.Clipped == 0 || st.Examples != n {
				t.Errorf("%s: stats %+v: want clipped users and %d examples", tm.name, st, n)
			}
		}
	}
}

func TestUserClippedSumErrors(t *testing.T) {
	m, err := testModels()[0].mk()
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(m, Options{Norm: 1, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	x, y := randBatch(rand.New(rand.NewPCG(1, 2)), 3, e.chw, m.Classes())
	dst := make([]float32, m.NumParams())
	for _, groups := range [][]int{{1, 1}, {3, 0}, {4}, {2, 2}} {
		if _, err := e.UserClippedSum(x, y, groups, UserOptions{}, dst); err == nil {
			t.Errorf("groups %v of 3 examples accepted", groups)
		}
	}
	if _, err := e.UserClippedSum(x, y, []int{1, 2}, UserOptions{}, dst); err != nil {
		t.Error(err)
	}
}
