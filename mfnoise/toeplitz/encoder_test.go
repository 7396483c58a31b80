package toeplitz_test

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/internal/mftest"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"
)

// testEncoders are Toeplitz encoders of every structure at n steps:
// the square root, DP-SGD, banded positive decreasing, banded mixed sign,
// banded positive non-monotone, and BLTs with 1 to 5 buffers.
func testEncoders(t *testing.T, n int) []*toeplitz.Encoder {
	t.Helper()
	rng := mrand.New(mrand.NewPCG(7, uint64(n)))
	var out []*toeplitz.Encoder
	add := func(m *toeplitz.Encoder, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	add(toeplitz.Sqrt(n))
	add(toeplitz.New("dpsgd", n, []float64{1}))
	for _, p := range []int{1, 2, 5} {
		if p <= n {
			add(toeplitz.BandedInverseSqrt(n, p))
		}
	}
	p := min(n, 5)
	dec, mixed, bump := make([]float64, p), make([]float64, p), make([]float64, p)
	dec[0], mixed[0], bump[0] = 1.3, 0.9, 1
	for j := 1; j < p; j++ {
		dec[j] = dec[j-1] * (0.3 + 0.6*rng.Float64())
		mixed[j] = rng.NormFloat64() * 0.5
		bump[j] = rng.Float64() * 1.5
	}
	add(toeplitz.New("dec", n, dec))
	add(toeplitz.New("mixed", n, mixed))
	add(toeplitz.New("bump", n, bump))
	for nb := 1; nb <= 5; nb++ {
		q := toeplitz.BLTParams{}
		for range nb {
			q.Theta = append(q.Theta, 0.2+0.79*rng.Float64())
			q.Omega = append(q.Omega, 0.8*rng.Float64()/float64(nb))
		}
		add(toeplitz.NewBLT(fmt.Sprintf("blt%d", nb), n, q))
	}
	return out
}

func toeplitzDense(c []float64) *mat.Dense {
	n := len(c)
	m := mat.NewDense(n, n, nil)
	for i := range n {
		for j := 0; j <= i; j++ {
			m.Set(i, j, c[i-j])
		}
	}
	return m
}

// TestSqrtSquaresToPrefixSum: C^2 = S, B = S C^-1 = C (1e-12).
func TestSqrtSquaresToPrefixSum(t *testing.T) {
	for _, n := range []int{1, 2, 9, 100} {
		m, err := toeplitz.Sqrt(n)
		if err != nil {
			t.Fatal(err)
		}
		c := toeplitzDense(m.Column())
		var sq mat.Dense
		sq.Mul(c, c)
		s, _ := dpcore.PrefixSum(n)
		a, _ := s.Matrix()
		sq.Sub(&sq, a)
		if e := mat.Norm(&sq, math.Inf(1)); e > 1e-12 {
			t.Fatalf("n=%d: ||C^2 - S||_max = %.3g", n, e)
		}
		f, err := mfnoise.Dense(&toeplitz.Strategy{Encoder: m, Workload: s})
		if err != nil {
			t.Fatal(err)
		}
		var d mat.Dense
		d.Sub(f.Decoder, c)
		if e := mat.Norm(&d, math.Inf(1)); e > 1e-12 {
			t.Fatalf("n=%d: ||B - C|| = %.3g", n, e)
		}
		// c_j = binom(2j, j) / 4^j.
		if n == 9 {
			want := []float64{1, 0.5, 0.375, 0.3125, 70.0 / 256}
			for j, v := range want {
				if mftest.RelErr(m.Coef[j], v) > 1e-15 {
					t.Fatalf("c_%d = %v, want %v", j, m.Coef[j], v)
				}
			}
		}
	}
}

// TestToeplitzAgainstDense: encoder, decoder products, inverse, row norms,
// loss and sensitivity agree with the dense generic code (1e-9 relative).
func TestToeplitzAgainstDense(t *testing.T) {
	// n = 100 > 64 takes the FFT products of the square root.
	for _, n := range []int{48, 100} {
		toeplitzAgainstDense(t, n)
	}
}

func toeplitzAgainstDense(t *testing.T, n int) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	prefix, _ := dpcore.PrefixSum(n)
	mom, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.ConstantSchedule(0.5))
	cool, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.25, 0.05))
	kb, _ := dpcore.KBParticipation(4, n/4)
	kb2, _ := dpcore.KBParticipation(6, (n+5)/6)
	for _, m := range testEncoders(t, n) {
		for _, w := range []dpcore.Workload{prefix, mom, cool} {
			name := m.Name + "/" + w.String()
			f, err := mfnoise.Dense(&toeplitz.Strategy{Encoder: m, Workload: w})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			x := make([]float64, n)
			for i := range x {
				x[i] = rng.NormFloat64()
			}
			got := make([]float64, n)
			var want mat.VecDense
			if err := m.ApplyEncoder(got, x); err != nil {
				t.Fatal(err)
			}
			want.MulVec(f.Encoder, mat.NewVecDense(n, x))
			for i := range got {
				if math.Abs(got[i]-want.AtVec(i)) > 1e-9*(1+math.Abs(want.AtVec(i))) {
					t.Fatalf("%s: (Cx)_%d = %v, dense %v", name, i, got[i], want.AtVec(i))
				}
			}
			if err := m.ApplyDecoder(w, got, x); err != nil {
				t.Fatal(err)
			}
			want.MulVec(f.Decoder, mat.NewVecDense(n, x))
			for i := range got {
				if math.Abs(got[i]-want.AtVec(i)) > 1e-9*(1+math.Abs(want.AtVec(i))) {
					t.Fatalf("%s: (Bx)_%d = %v, dense %v", name, i, got[i], want.AtVec(i))
				}
			}
			rows, err := m.DecoderRowNorms(w)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range rows {
				r := f.Decoder.RawRowView(i)
				if mftest.RelErr(v, floats.Dot(r, r)) > 1e-9 {
					t.Fatalf("%s: ||B[%d,:]||^2 = %v, dense %v", name, i, v, floats.Dot(r, r))
				}
			}
			for _, schema := range []dpcore.Schema{dpcore.SingleParticipation(), kb, kb2} {
				got, err := m.Sensitivity(schema)
				if err != nil {
					t.Fatal(err)
				}
				want, err := f.Sensitivity(schema)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case got.Exact && want.Exact:
					if mftest.RelErr(got.Value, want.Value) > 1e-9 {
						t.Fatalf("%s %s: sens %v (%s), dense %v (%s)", name, schema, got.Value, got.Method, want.Value, want.Method)
					}
				case got.Exact:
					// Dense bound: must not be below the exact value.
					if want.Value < got.Value*(1-1e-9) {
						t.Fatalf("%s %s: exact sens %v above the dense bound %v", name, schema, got.Value, want.Value)
					}
				default:
					// Our bound must not be below the true sensitivity,
					// which is at least ||C s||, s = signed pattern sums.
					if lb := signedPatternLower(f.Encoder, schema); got.Value < lb*(1-1e-9) {
						t.Fatalf("%s %s: bound %v below the attained %v", name, schema, got.Value, lb)
					}
				}
				lossGot, _, err := m.Loss(w, schema)
				if err != nil {
					t.Fatal(err)
				}
				if fro := mat.Norm(f.Decoder, 2); mftest.RelErr(lossGot, got.Value*got.Value*fro*fro) > 1e-9 {
					t.Fatalf("%s %s: loss %v, dense %v", name, schema, lossGot, got.Value*got.Value*fro*fro)
				}
			}
		}
	}
}

// signedPatternLower is max over (k,b) patterns and sign choices of ||C
// sum_{i in pi} s_i e_i||: a lower bound on the sensitivity (g_i = s_i u).
func signedPatternLower(c *mat.Dense, schema dpcore.Schema) float64 {
	_, n := c.Dims()
	best := 0.0
	for _, p := range schema.Patterns(n) {
		for mask := 0; mask < 1<<len(p); mask++ {
			v := make([]float64, n)
			for q, i := range p {
				v[i] = 1
				if mask>>q&1 == 1 {
					v[i] = -1
				}
			}
			var y mat.VecDense
			y.MulVec(c, mat.NewVecDense(n, v))
			best = math.Max(best, mat.Norm(&y, 2))
		}
	}
	return best
}

// TestToeplitzMinSepBruteForce: under min-sep participation the packed
// formula equals max over all patterns of 1^T X_pi 1 when the coefficients
// are non-negative and non-increasing (exact), and bounds max_pi sum
// |X_ij| otherwise.
func TestToeplitzMinSepBruteForce(t *testing.T) {
	for _, tc := range []struct{ n, k, b int }{{14, 3, 3}, {16, 4, 2}, {13, 2, 5}} {
		schema, _ := dpcore.MinSepParticipation(tc.k, tc.b)
		pats := mftest.MinSepPatterns(tc.n, tc.k, tc.b)
		for _, m := range testEncoders(t, tc.n) {
			x := linalg.Gram(toeplitzDense(m.Column()))
			exact, abs := 0.0, 0.0
			for _, p := range pats {
				e, a := 0.0, 0.0
				for _, i := range p {
					for _, j := range p {
						e += x.At(i, j)
						a += math.Abs(x.At(i, j))
					}
				}
				exact, abs = math.Max(exact, e), math.Max(abs, a)
			}
			got, err := m.Sensitivity(schema)
			if err != nil {
				t.Fatal(err)
			}
			g2 := got.Value * got.Value
			if got.Exact {
				if mftest.RelErr(g2, exact) > 1e-12 {
					t.Fatalf("%s n=%d %s: packed sens^2 %v, brute force %v", m.Name, tc.n, schema, g2, exact)
				}
			} else if g2 < abs*(1-1e-12) {
				t.Fatalf("%s n=%d %s: bound %v below max sum |X| = %v", m.Name, tc.n, schema, g2, abs)
			}
			wantExact := m.Name != "mixed" && m.Name != "bump"
			if got.Exact != wantExact {
				t.Fatalf("%s %s: exact = %v, want %v", m.Name, schema, got.Exact, wantExact)
			}
		}
	}
}

// TestBLTUnboundedSensitivity: the closed-form tail equals a long finite
// sum, and bounds every finite horizon.
func TestBLTUnboundedSensitivity(t *testing.T) {
	p := toeplitz.BLTParams{Theta: []float64{0.9, 0.5, 0.97}, Omega: []float64{0.2, 0.1, 0.05}}
	for _, kb := range [][2]int{{1, 1}, {3, 7}, {10, 20}} {
		k, b := kb[0], kb[1]
		inf := toeplitz.BLTUnboundedSens2(&p, k, b)
		long := toeplitz.PackedSens2(toeplitz.Column(&p, (k-1)*b+4000), k, b)
		if mftest.RelErr(inf, long) > 1e-10 {
			t.Fatalf("k=%d b=%d: unbounded %v, long finite %v", k, b, inf, long)
		}
		if short := toeplitz.PackedSens2(toeplitz.Column(&p, k*b), k, b); short > inf {
			t.Fatalf("finite horizon %v above unbounded %v", short, inf)
		}
	}
}

func TestToeplitzBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"zero c0", func() error { _, err := toeplitz.New("x", 4, []float64{0, 1}); return err }()},
		{"nan", func() error { _, err := toeplitz.New("x", 4, []float64{1, math.NaN()}); return err }()},
		{"too many", func() error { _, err := toeplitz.New("x", 2, []float64{1, 1, 1}); return err }()},
		{"theta 1", func() error {
			_, err := toeplitz.NewBLT("x", 4, toeplitz.BLTParams{Theta: []float64{1}, Omega: []float64{0.1}})
			return err
		}()},
		{"huge n", func() error { _, err := toeplitz.Sqrt(100_000_000); return err }()},
		{"zero n", func() error { _, err := toeplitz.Sqrt(0); return err }()},
		{"blt 0", func() error {
			w, _ := dpcore.PrefixSum(10)
			_, _, err := toeplitz.Optimize(context.Background(), toeplitz.Problem{Workload: w, Schema: dpcore.SingleParticipation(), Buffers: 0}, nil)
			return err
		}()},
		{"cooldown", func() error {
			w, _ := dpcore.MomentumWorkload(10, 0.9, dpcore.CooldownSchedule(10, 0.5, 0.05))
			_, _, err := toeplitz.Optimize(context.Background(), toeplitz.Problem{Workload: w, Schema: dpcore.SingleParticipation(), Bands: 3}, nil)
			return err
		}()},
		{"toeplitz work", func() error {
			w, _ := dpcore.PrefixSum(1 << 22)
			_, _, err := toeplitz.Optimize(context.Background(), toeplitz.Problem{Workload: w, Schema: dpcore.SingleParticipation(), Bands: 1 << 12}, nil)
			return err
		}()},
		{"unbounded horizon", func() error {
			m, _ := toeplitz.NewBLT("x", 10, toeplitz.BLTParams{Theta: []float64{0.5}, Omega: []float64{0.5}})
			schema, _ := dpcore.MinSepParticipation(1<<20, 1<<20)
			_, err := m.StreamSensitivity(schema)
			return err
		}()},
		{"empty sens", func() error {
			_, err := (&toeplitz.Encoder{Name: "x", N: 5}).Sensitivity(dpcore.SingleParticipation())
			return err
		}()},
		{"empty norms", func() error {
			w, _ := dpcore.PrefixSum(5)
			_, err := (&toeplitz.Encoder{Name: "x", N: 5}).DecoderRowNorms(w)
			return err
		}()},
	} {
		if tc.err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
}

// TestBLTStreamSensitivity: the unbounded-stream sensitivity bounds every
// finite horizon and is refused where its conditions fail.
func TestBLTStreamSensitivity(t *testing.T) {
	m, _ := toeplitz.NewBLT("b", 1<<40, toeplitz.BLTParams{Theta: []float64{0.99, 0.5}, Omega: []float64{0.3, 0.2}})
	ms, _ := dpcore.MinSepParticipation(6, 40)
	inf, err := m.StreamSensitivity(ms)
	if err != nil || !inf.Exact {
		t.Fatal(inf, err)
	}
	if _, err := m.Sensitivity(ms); err == nil {
		t.Fatal("finite sensitivity at n = 2^40 accepted")
	}
	for _, n := range []int{40, 239, 1000, 5000} {
		f, _ := toeplitz.NewBLT("b", n, *m.BLT)
		s, err := f.Sensitivity(ms)
		if err != nil || s.Value > inf.Value*(1+1e-12) {
			t.Fatalf("n = %d: %v above the stream sensitivity %v (%v)", n, s.Value, inf.Value, err)
		}
	}
	bad, _ := toeplitz.NewBLT("b", 10, toeplitz.BLTParams{Theta: []float64{0.9, 0.5}, Omega: []float64{0.9, 0.2}})
	if _, err := bad.StreamSensitivity(ms); err == nil {
		t.Fatal("scales summing above 1 accepted")
	}
	kb, _ := dpcore.KBParticipation(2, 5)
	if _, err := m.StreamSensitivity(kb); err == nil {
		t.Fatal("(k,b) on an unbounded stream accepted")
	}
}

// TestMinSepPackedRandom: for random non-negative non-increasing
// coefficients (including plateaus and steep drops) the packed pattern is
// the worst min-sep pattern, by enumeration: the theorem the exact min-sep
// sensitivity relies on.
func TestMinSepPackedRandom(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(11, 12))
	for trial := range 300 {
		n := 6 + rng.IntN(10)
		k, b := 1+rng.IntN(4), 1+rng.IntN(4)
		c := make([]float64, n)
		c[0] = 1
		for j := 1; j < n; j++ {
			switch rng.IntN(3) {
			case 0:
				c[j] = c[j-1] // plateau
			case 1:
				c[j] = c[j-1] * rng.Float64() * 0.3 // steep drop
			default:
				c[j] = c[j-1] * (0.7 + 0.3*rng.Float64())
			}
		}
		m, _ := toeplitz.New("r", n, c)
		schema, _ := dpcore.MinSepParticipation(k, b)
		got, err := m.Sensitivity(schema)
		if err != nil || !got.Exact {
			t.Fatal(got, err)
		}
		x := linalg.Gram(toeplitzDense(c))
		exact := 0.0
		for _, p := range mftest.MinSepPatterns(n, k, b) {
			e := 0.0
			for _, i := range p {
				for _, j := range p {
					e += x.At(i, j)
				}
			}
			exact = math.Max(exact, e)
		}
		if mftest.RelErr(got.Value*got.Value, exact) > 1e-12 {
			t.Fatalf("trial %d n=%d k=%d b=%d c=%v: packed %v, worst pattern %v", trial, n, k, b, c, got.Value*got.Value, exact)
		}
	}
}
