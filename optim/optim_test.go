package optim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/mat"

	"github.com/dpmf-go/dpmf/dpcore"
)

// testSchedules are the schedule shapes the exactness tests cover.
func testSchedules(n int) map[string]dpcore.Schedule {
	rng := rand.New(rand.NewPCG(7, 8))
	ex := make([]float64, n+5)
	for i := range ex {
		ex[i] = 0.01 + rng.Float64()
	}
	return map[string]dpcore.Schedule{
		"unit":            {},
		"constant0.1":     Constant(0.1),
		"cooldown25%":     CooldownFraction(0.3, n, 0.25),
		"cooldownLast7":   CooldownLast(2, 7),
		"warmup+cooldown": {Base: 0.5, WarmupSteps: 5, CooldownSteps: 10, CooldownFinal: 0.1},
		"stepdecay":       StepDecay(1, 0.5, 10, 20),
		"explicit":        Explicit(ex),
	}
}

// gradStream returns a fixed-seed n x d gradient stream and theta_0.
func gradStream(n, d int, seed uint64) ([][]float64, []float64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	g := make([][]float64, n)
	for i := range g {
		g[i] = make([]float64, d)
		for k := range g[i] {
			g[i][k] = rng.NormFloat64()
		}
	}
	th := make([]float64, d)
	for k := range th {
		th[k] = rng.NormFloat64()
	}
	return g, th
}

// checkAffine asserts theta_i = f_i theta_0 - (A G)_i for every step i and
// coordinate, to 1e-12 relative to the size of the terms.
func checkAffine(t *testing.T, a mat.Matrix, f []float64, g [][]float64, th0 []float64, thetas [][]float64) {
	t.Helper()
	n, d := len(thetas), len(th0)
	for i := 0; i < n; i++ {
		for k := 0; k < d; k++ {
			want := th0[k]
			if f != nil {
				want *= f[i]
			}
			scale := math.Abs(want)
			for j := 0; j <= i; j++ {
				term := a.At(i, j) * g[j][k]
				want -= term
				scale += math.Abs(term)
			}
			for j := i + 1; j < a.(*mat.Dense).RawMatrix().Cols; j++ {
				if a.At(i, j) != 0 {
					t.Fatalf("A[%d,%d] = %v above the diagonal", i, j, a.At(i, j))
				}
			}
			if got := thetas[i][k]; math.Abs(got-want) > 1e-12*math.Max(1, scale) {
				t.Fatalf("theta_%d[%d] = %.17g, want theta_0 - (A G) = %.17g", i+1, k, got, want)
			}
		}
	}
}

// run64 steps o over g from th0 and returns every theta_i.
func run64(t *testing.T, step func(p, g []float64) error, g [][]float64, th0 []float64) [][]float64 {
	t.Helper()
	p := append([]float64(nil), th0...)
	out := make([][]float64, len(g))
	for i := range g {
		if err := step(p, g[i]); err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		out[i] = append([]float64(nil), p...)
	}
	return out
}

func TestMomentumMatchesMfnoiseWorkload(t *testing.T) {
	const n, d = 40, 3
	for _, beta := range []float64{0, 0.5, 0.9, 0.95} {
		for name, s := range testSchedules(n) {
			t.Run(fmt.Sprintf("beta=%v/%s", beta, name), func(t *testing.T) {
				o, err := NewMomentum(d, beta, s, n, MomentumOptions{})
				if err != nil {
					t.Fatal(err)
				}
				g, th0 := gradStream(n, d, uint64(1000*beta)+uint64(len(name)))
				thetas := run64(t, o.Step64, g, th0)
				// The full workload, and a prefix workload over fewer steps
				// (its schedule must keep the optimizer's own rates).
				for _, m := range []int{n, n / 2} {
					w, err := o.Workload(m)
					if err != nil {
						t.Fatal(err)
					}
					if w.N != m {
						t.Fatalf("workload n = %d, want %d", w.N, m)
					}
					a, err := w.Matrix()
					if err != nil {
						t.Fatal(err)
					}
					checkAffine(t, a, nil, g[:m], th0, thetas[:m])
				}
				// Matrix (the general builder) agrees with mfnoise's matrix.
				a1, _ := o.Matrix(n)
				w, _ := o.Workload(n)
				a2, _ := w.Matrix()
				if !mat.EqualApprox(a1, a2, 1e-12) {
					t.Fatal("Matrix differs from mfnoise Workload.Matrix")
				}
			})
		}
	}
}

func TestSGDWorkloadKinds(t *testing.T) {
	const n, d = 30, 2
	for name, s := range testSchedules(n) {
		o, err := NewSGD(d, s, n)
		if err != nil {
			t.Fatal(err)
		}
		g, th0 := gradStream(n, d, 3)
		thetas := run64(t, o.Step64, g, th0)
		w, err := o.Workload(n)
		if err != nil {
			t.Fatal(err)
		}
		wantKind := dpcore.MomentumKind
		if name == "unit" {
			wantKind = dpcore.PrefixSumKind
		}
		if w.Kind != wantKind || w.Momentum != 0 {
			t.Fatalf("%s: workload %v, want kind %v with beta 0", name, w, wantKind)
		}
		a, _ := w.Matrix()
		checkAffine(t, a, nil, g, th0, thetas)
	}
	// A schedule whose rates are all exactly 1 is the prefix sum whatever
	// its form.
	o, _ := NewSGD(d, Explicit([]float64{1, 1, 1, 1}), 4)
	if w, _ := o.Workload(4); w.Kind != dpcore.PrefixSumKind {
		t.Fatalf("explicit ones: %v, want prefix sum", w)
	}
}

func TestNesterovAndWeightDecayMatrix(t *testing.T) {
	const n, d = 32, 3
	for _, beta := range []float64{0, 0.9} {
		for _, opt := range []MomentumOptions{{Nesterov: true}, {WeightDecay: 0.3}, {Nesterov: true, WeightDecay: 0.05}} {
			for name, s := range testSchedules(n) {
				o, err := NewMomentum(d, beta, s, n, opt)
				if err != nil {
					t.Fatal(err)
				}
				w, err := o.Workload(n)
				if opt.WeightDecay != 0 || beta != 0 {
					if !errors.Is(err, ErrUnsupportedWorkload) {
						t.Fatalf("%+v: Workload error %v, want ErrUnsupportedWorkload", opt, err)
					}
				} else if a, _ := w.Matrix(); err != nil || !mat.EqualApprox(a, must(o.Matrix(n)), 1e-12) {
					t.Fatalf("Nesterov with beta 0: workload %v (%v), want SGD's", w, err)
				}
				g, th0 := gradStream(n, d, 11)
				thetas := run64(t, o.Step64, g, th0)
				a, err := o.Matrix(n)
				if err != nil {
					t.Fatal(err)
				}
				f, _ := o.ThetaZeroFactor(n)
				if opt.WeightDecay == 0 {
					for _, v := range f {
						if v != 1 {
							t.Fatalf("theta0 factor %v without weight decay", v)
						}
					}
				}
				t.Run(fmt.Sprintf("beta=%v/%+v/%s", beta, opt, name), func(t *testing.T) {
					checkAffine(t, a, f, g, th0, thetas)
				})
			}
		}
	}
}

// The Nesterov matrix has the closed form M_eta (I + beta M_beta).
func TestNesterovClosedForm(t *testing.T) {
	const n, beta = 12, 0.8
	s := CooldownFraction(0.7, n, 0.25)
	o, _ := NewMomentum(1, beta, s, n, MomentumOptions{Nesterov: true})
	eta := o.Rates()
	me := mat.NewDense(n, n, nil)
	mb := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		for j := 0; j <= i; j++ {
			me.Set(i, j, eta[j])
			mb.Set(i, j, beta*math.Pow(beta, float64(i-j)))
		}
		mb.Set(i, i, mb.At(i, i)+1)
	}
	var want mat.Dense
	want.Mul(me, mb)
	got, _ := o.Matrix(n)
	if !mat.EqualApprox(got, &want, 1e-12) {
		t.Fatalf("Nesterov A\n%v\nwant\n%v", mat.Formatted(got), mat.Formatted(&want))
	}
}

func TestAdamReference(t *testing.T) {
	const b1, b2, eps, wd = 0.9, 0.999, 1e-8, 0.01
	rates := []float64{0.1, 0.05, 0.02}
	o, err := NewAdam(2, Explicit(rates), 3, AdamOptions{WeightDecay: wd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Workload(3); !errors.Is(err, ErrNonlinear) {
		t.Fatalf("Adam workload error %v, want ErrNonlinear", err)
	}
	g := [][]float64{{1, -2}, {0.5, 3}, {-1, 0}}
	p := []float64{1, -1}
	// Scalar reference written from the textbook formulas.
	ref := []float64{1, -1}
	m, v := []float64{0, 0}, []float64{0, 0}
	for i := range g {
		if err := o.Step64(p, g[i]); err != nil {
			t.Fatal(err)
		}
		for k := range ref {
			m[k] = b1*m[k] + (1-b1)*g[i][k]
			v[k] = b2*v[k] + (1-b2)*g[i][k]*g[i][k]
			mh := m[k] / (1 - math.Pow(b1, float64(i+1)))
			vh := v[k] / (1 - math.Pow(b2, float64(i+1)))
			ref[k] = ref[k]*(1-rates[i]*wd) - rates[i]*mh/(math.Sqrt(vh)+eps)
			if math.Abs(p[k]-ref[k]) > 1e-14 {
				t.Fatalf("step %d: theta[%d] = %v, want %v", i+1, k, p[k], ref[k])
			}
		}
	}
}

// The float32 path computes the same update as the float64 path up to
// float32 rounding.
func TestFloat32MatchesFloat64(t *testing.T) {
	const n, d = 50, 8
	g, th0 := gradStream(n, d, 21)
	for _, opt := range []MomentumOptions{{}, {Nesterov: true, WeightDecay: 0.01}} {
		o64, _ := NewMomentum(d, 0.9, CooldownFraction(0.05, n, 0.25), n, opt)
		o32, _ := NewMomentum(d, 0.9, CooldownFraction(0.05, n, 0.25), n, opt)
		p64 := append([]float64(nil), th0...)
		p32 := make([]float32, d)
		for k := range p32 {
			p32[k] = float32(th0[k])
		}
		g32 := make([]float32, d)
		for i := range g {
			for k := range g32 {
				g32[k] = float32(g[i][k])
			}
			if err := o64.Step64(p64, g[i]); err != nil {
				t.Fatal(err)
			}
			if err := o32.Step(p32, g32); err != nil {
				t.Fatal(err)
			}
		}
		for k := range p64 {
			if math.Abs(float64(p32[k])-p64[k]) > 1e-5*math.Max(1, math.Abs(p64[k])) {
				t.Fatalf("%+v: float32 %v, float64 %v", opt, p32[k], p64[k])
			}
		}
	}
}

func must(a *mat.Dense, err error) *mat.Dense {
	if err != nil {
		panic(err)
	}
	return a
}
