package clip

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
)

type testModel struct {
	name string
	mk   func() (models.Model, error)
	noFD bool // too large for the float64 finite-difference reference
}

func testModels() []testModel {
	return []testModel{
		{"logistic", func() (models.Model, error) { return models.NewLogistic([3]int{1, 4, 4}, 3, 1) }, false},
		{"mlp-tanh", func() (models.Model, error) { return models.NewMLP([3]int{2, 3, 3}, []int{7, 5}, 4, nn.Tanh, 2) }, false},
		{"mlp-relu", func() (models.Model, error) { return models.NewMLP([3]int{1, 4, 4}, []int{6}, 3, nn.ReLU, 3) }, false},
		// 8x8 inputs: convolutions on 8x8, 4x4, 2x2 with pooling between,
		// so both the materialized and the ghost norm paths run.
		{"cnn", func() (models.Model, error) { return models.NewCIFARCNN([3]int{2, 8, 8}, 3, 4) }, false},
		// 10x10 inputs: the second pool sees an odd 5x5 map (floor to
		// 2x2), as the third pool does (7x7) for 28x28 inputs.
		{"cnn-odd", func() (models.Model, error) { return models.NewCIFARCNN([3]int{1, 10, 10}, 2, 5) }, false},
		// Full-size inputs: per-layer norm methods as used in training
		// (ghost norms for the 8x8 convolutions of CIFAR).
		{"cifar32", func() (models.Model, error) { return models.NewCIFARCNN([3]int{3, 32, 32}, 10, 6) }, true},
		{"mnist28", func() (models.Model, error) { return models.NewCIFARCNN([3]int{1, 28, 28}, 10, 7) }, true},
		// The small end-to-end CNN: strided 8x8 and 4x4 convolutions, the
		// first padded (14x14 inputs: 6x6 and 2x2 maps).
		{"cnn-small", func() (models.Model, error) { return models.NewSmallCNN([3]int{1, 14, 14}, 3, 8) }, false},
		{"cnn-small28", func() (models.Model, error) { return models.NewSmallCNN([3]int{1, 28, 28}, 10, 9) }, false},
	}
}

// batchOne returns each example's unclipped gradient from separate
// batch-size-1 passes.
func batchOne(t *testing.T, e *Engine, x []float32, y []int) [][]float32 {
	t.Helper()
	chw := e.chw
	out := make([][]float32, len(y))
	for i := range y {
		out[i] = make([]float32, e.m.NumParams())
		if _, err := e.ClippedSum(x[i*chw:(i+1)*chw], y[i:i+1], out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestPerExampleGradients(t *testing.T) {
	for k, tm := range testModels() {
		t.Run(tm.name, func(t *testing.T) {
			m, err := tm.mk()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(k), 7))
			// Non-zero biases so their gradients are exercised off zero.
			for _, p := range m.Layout() {
				if len(p.Shape) == 1 || tm.name == "logistic" {
					for j := range p.Len {
						m.Params()[p.Offset+j] = float32(0.1 * rng.NormFloat64())
					}
				}
			}
			// A threshold no gradient reaches: norms are computed, nothing
			// is scaled.
			e, err := New(m, Options{Norm: 1e30, MaxBatch: 16})
			if err != nil {
				t.Fatal(err)
			}
			np, err := New(m, Options{NonPrivate: true, MaxBatch: 16})
			if err != nil {
				t.Fatal(err)
			}
			// Graphs come in sizes that are multiples of 2 here: n = 5
			// runs padded to 6, the batch-1 passes below padded to 2.
			const n = 5
			x, y := randBatch(rng, n, e.chw, m.Classes())
			sum := make([]float32, m.NumParams())
			st, err := e.ClippedSum(x, y, sum)
			if err != nil {
				t.Fatal(err)
			}
			if st.Examples != n || st.NonFinite != 0 || st.Clipped != 0 {
				t.Fatalf("stats %+v", st)
			}
			batched := perExample(t, e, x, y)
			norms := append([]float64(nil), e.acc.norms[:n]...)
			single := batchOne(t, e, x, y)
			want := make([]float32, m.NumParams())
			for i := range n {
				if d := relDiff(batched[i], single[i]); d > 1e-4 {
					t.Errorf("example %d: batched vs batch-1 gradient rel diff %.2g", i, d)
				}
				if d := math.Abs(norms[i]-norm32(single[i])) / norm32(single[i]); d > 1e-4 {
					t.Errorf("example %d: norm %v, batch-1 gradient norm %v", i, norms[i], norm32(single[i]))
				}
				for j, v := range single[i] {
					want[j] += v
				}
			}
			if d := relDiff(sum, want); d > 1e-4 {
				t.Errorf("batched sum vs sum of batch-1 gradients: rel diff %.2g", d)
			}
			if _, err := np.ClippedSum(x, y, sum); err != nil {
				t.Fatal(err)
			}
			if d := relDiff(sum, want); d > 1e-4 {
				t.Errorf("non-private sum vs sum of batch-1 gradients: rel diff %.2g", d)
			}
			// Finite differences of the float64 reference on a sample of
			// coordinates of every parameter tensor.
			p64 := make([]float64, m.NumParams())
			for j, v := range m.Params() {
				p64[j] = float64(v)
			}
			fdExamples, fdCoords := 2, 6
			if testing.Short() {
				fdExamples, fdCoords = 1, 3
			}
			if tm.noFD {
				fdExamples = 0
			}
			for i := range fdExamples {
				x64 := make([]float64, e.chw)
				for j := range x64 {
					x64[j] = float64(x[i*e.chw+j])
				}
				var got, fd []float32
				for _, p := range m.Layout() {
					for range min(p.Len, fdCoords) {
						j := p.Offset + rng.IntN(p.Len)
						const h = 1e-4
						old := p64[j]
						p64[j] = old + h
						lp := refLoss(m, p64, x64, y[i])
						p64[j] = old - h
						lm := refLoss(m, p64, x64, y[i])
						p64[j] = old
						fd = append(fd, float32((lp-lm)/(2*h)))
						got = append(got, single[i][j])
					}
				}
				if d := relDiff(got, fd); d > 1e-4 {
					t.Errorf("example %d: gradient vs finite differences rel diff %.2g\n got %v\nwant %v", i, d, got, fd)
				}
			}
		})
	}
}

// layerOf returns for every parameter index the index of its affine layer.
func layerOf(m models.Model) []int {
	out := make([]int, m.NumParams())
	for k, p := range m.Layout() {
		for j := range p.Len {
			out[p.Offset+j] = k / 2
		}
	}
	return out
}

func TestClippedSumMatchesIndividual(t *testing.T) {
	for k, tm := range testModels() {
		t.Run(tm.name, func(t *testing.T) {
			if tm.noFD && testing.Short() {
				t.Skip("full-size model in -short mode")
			}
			m, err := tm.mk()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(k), 11))
			ref, err := New(m, Options{NonPrivate: true, MaxBatch: 8})
			if err != nil {
				t.Fatal(err)
			}
			const n = 7
			x, y := randBatch(rng, n, ref.chw, m.Classes())
			single := batchOne(t, ref, x, y)
			ns := make([]float64, n)
			for i := range n {
				ns[i] = norm32(single[i])
			}
			nl := ref.naff
			lay := layerOf(m)
			layerNorm := func(g []float32) []float64 {
				s := make([]float64, nl)
				for j, v := range g {
					s[lay[j]] += float64(v) * float64(v)
				}
				for l := range s {
					s[l] = math.Sqrt(s[l])
				}
				return s
			}
			linf := func(g []float32) float64 { return maxabs(g) }
			zeta := sortedMedian(ns)
			perLayer := make([]float64, nl)
			for l := range perLayer {
				var v []float64
				for i := range n {
					v = append(v, layerNorm(single[i])[l])
				}
				perLayer[l] = sortedMedian(v)
			}
			var infs []float64
			for i := range n {
				infs = append(infs, linf(single[i]))
			}
			linfT := sortedMedian(infs)

			cases := []struct {
				name  string
				opt   Options
				scale func(i int, g []float32) []float32
			}{
				{"flat", Options{Norm: zeta}, func(i int, g []float32) []float32 {
					return scaled(g, min(1, zeta/ns[i]))
				}},
				{"perlayer", Options{PerLayer: perLayer}, func(i int, g []float32) []float32 {
					ln := layerNorm(g)
					out := make([]float32, len(g))
					for j, v := range g {
						out[j] = v * float32(min(1, perLayer[lay[j]]/ln[lay[j]]))
					}
					return out
				}},
				{"linf", Options{Norm: zeta, LInfZero: linfT}, func(i int, g []float32) []float32 {
					if linf(g) > linfT {
						return scaled(g, 0)
					}
					return scaled(g, min(1, zeta/ns[i]))
				}},
			}
			for _, c := range cases {
				c.opt.MaxBatch = 8
				e, err := New(m, c.opt)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]float32, m.NumParams())
				st, err := e.ClippedSum(x, y, got)
				if err != nil {
					t.Fatal(err)
				}
				want := make([]float32, m.NumParams())
				for i := range n {
					for j, v := range c.scale(i, single[i]) {
						want[j] += v
					}
				}
				if d := relDiff(got, want); d > 1e-4 {
					t.Errorf("%s: clipped sum vs sum of clipped batch-1 gradients: rel diff %.2g", c.name, d)
				}
				if c.name == "flat" {
					if want := 3.0 / 7; math.Abs(st.Clipped-want) > 1e-12 {
						t.Errorf("clipped fraction %v, want %v", st.Clipped, want)
					}
					// Each example alone: clipped norm <= zeta, exactly.
					one := make([]float32, m.NumParams())
					for i := range n {
						if _, err := e.ClippedSum(x[i*e.chw:(i+1)*e.chw], y[i:i+1], one); err != nil {
							t.Fatal(err)
						}
						if nn := norm32(one); nn > zeta {
							t.Errorf("example %d: clipped norm %v > zeta %v", i, nn, zeta)
						}
					}
				}
				if c.name == "linf" && st.Zeroed != 3 {
					t.Errorf("linf: zeroed %d, want 3", st.Zeroed)
				}
			}
		})
	}
}

func scaled(g []float32, c float64) []float32 {
	out := make([]float32, len(g))
	for j, v := range g {
		out[j] = v * float32(c)
	}
	return out
}

// sortedMedian returns a threshold between the middle element of an
// odd-length sample and the next larger one, so ties cannot flip.
func sortedMedian(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return (s[len(s)/2] + s[len(s)/2+1]) / 2
}

func TestNonFinite(t *testing.T) {
	for k, tm := range testModels() {
		t.Run(tm.name, func(t *testing.T) {
			if tm.noFD && testing.Short() {
				t.Skip("full-size model in -short mode")
			}
			m, err := tm.mk()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(k), 13))
			for _, nonPrivate := range []bool{false, true} {
				// Graph sizes are multiples of 3: 4 examples run padded to 6.
				e, err := New(m, Options{Norm: 0.5, NonPrivate: nonPrivate, MaxBatch: 24})
				if err != nil {
					t.Fatal(err)
				}
				x, y := randBatch(rng, 4, e.chw, m.Classes())
				x[1*e.chw+3] = float32(math.NaN())
				x[3*e.chw] = float32(math.Inf(1))
				got := make([]float32, m.NumParams())
				st, err := e.ClippedSum(x, y, got)
				if err != nil {
					t.Fatal(err)
				}
				if st.NonFinite != 2 || st.Examples != 4 {
					t.Fatalf("stats %+v, want 2 non-finite of 4", st)
				}
				if math.IsNaN(st.Loss) || math.IsNaN(st.NormQuantiles[3]) {
					t.Errorf("stats not finite: %+v", st)
				}
				want := make([]float32, m.NumParams())
				one := make([]float32, m.NumParams())
				for _, i := range []int{0, 2} {
					if _, err := e.ClippedSum(x[i*e.chw:(i+1)*e.chw], y[i:i+1], one); err != nil {
						t.Fatal(err)
					}
					for j, v := range one {
						want[j] += v
					}
				}
				for j, v := range got {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("sum[%d] = %v", j, v)
					}
				}
				if d := relDiff(got, want); d > 1e-4 {
					t.Errorf("nonPrivate=%v: sum vs finite examples: rel diff %.2g", nonPrivate, d)
				}
				if m.Name() == "cifarcnn" {
					continue
				}
				// Finite inputs whose forward pass overflows float32 in
				// the relu network; the others saturate or stay finite.
				for j := range e.chw {
					x[1*e.chw+j] = 3e38
				}
				copy(x[3*e.chw:4*e.chw], x[2*e.chw:3*e.chw])
				if st, err = e.ClippedSum(x, y, got); err != nil {
					t.Fatal(err)
				}
				if tm.name == "mlp-relu" && st.NonFinite != 1 {
					t.Errorf("overflowing example: stats %+v, want 1 non-finite", st)
				}
				for j, v := range got {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("overflow: sum[%d] = %v", j, v)
					}
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	m, err := models.NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range []Options{
		{Norm: 1},
		{Norm: 0, MaxBatch: 2},
		{Norm: math.Inf(1), MaxBatch: 2},
		{PerLayer: []float64{1}, MaxBatch: 2},
		{PerLayer: []float64{1, -1}, MaxBatch: 2},
		{Norm: 1, LInfZero: -1, MaxBatch: 2},
	} {
		if _, err := New(m, opt); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("New(%+v) error %v, want dpcore.ErrInvalid", opt, err)
		}
	}
	e, err := New(m, Options{Norm: 1, MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, m.NumParams())
	for i, c := range []struct {
		x   []float32
		y   []int
		dst []float32
	}{
		{make([]float32, 4), []int{0}, dst[:3]},
		{make([]float32, 5), []int{0}, dst},
		{make([]float32, 4), []int{2}, dst},
		{make([]float32, 4), []int{0, 1}, dst},
		{make([]float32, 12), []int{0, 1, 1}, dst},
		{nil, nil, dst},
	} {
		if _, err := e.ClippedSum(c.x, c.y, c.dst); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("case %d: error %v, want dpcore.ErrInvalid", i, err)
		}
	}
	if _, _, err := e.Evaluate(make([]float32, 5), []int{0}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("Evaluate: error %v", err)
	}
	if _, err := e.Predict(make([]float32, 3)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("Predict: error %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := e.EvaluateContext(ctx, make([]float32, 4), []int{0}); !errors.Is(err, context.Canceled) {
		t.Errorf("EvaluateContext(cancelled): error %v", err)
	}
	nan := []float32{0, float32(math.NaN()), 0, 0}
	if _, _, err := e.Evaluate(nan, []int{0}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("Evaluate(NaN): error %v", err)
	}
	m.Params()[2] = float32(math.Inf(1))
	m.Params()[3] = float32(math.NaN())
	if _, err := e.ClippedSum(make([]float32, 4), []int{0}, dst); !errors.Is(err, ErrNonFiniteParams) || !strings.Contains(err.Error(), "parameter 2 is +Inf") {
		t.Errorf("ClippedSum with Inf parameter: error %v, want the first (parameter 2 is +Inf)", err)
	}
}

func TestEvaluatePredict(t *testing.T) {
	m, err := models.NewMLP([3]int{1, 2, 3}, []int{4}, 3, nn.ReLU, 5)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(m, Options{NonPrivate: true, MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	x, y := randBatch(rng, 11, e.chw, 3) // 3 batches, last one padded
	loss, acc, err := e.Evaluate(x, y)
	if err != nil {
		t.Fatal(err)
	}
	pred, err := e.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	p64 := make([]float64, m.NumParams())
	for j, v := range m.Params() {
		p64[j] = float64(v)
	}
	wantLoss, correct := 0.0, 0
	for i := range y {
		x64 := make([]float64, e.chw)
		for j := range x64 {
			x64[j] = float64(x[i*e.chw+j])
		}
		wantLoss += refLoss(m, p64, x64, y[i])
		// The predicted class has the smallest loss when used as label.
		best, bl := 0, math.Inf(1)
		for c := range 3 {
			if l := refLoss(m, p64, x64, c); l < bl {
				best, bl = c, l
			}
		}
		if pred[i] != best {
			t.Errorf("example %d: predicted %d, reference %d", i, pred[i], best)
		}
		if best == y[i] {
			correct++
		}
	}
	wantLoss /= float64(len(y))
	if math.Abs(loss-wantLoss) > 1e-5*wantLoss || acc != float64(correct)/float64(len(y)) {
		t.Errorf("Evaluate = (%v, %v), want (%v, %v)", loss, acc, wantLoss, float64(correct)/float64(len(y)))
	}
}

// countingBLAS counts float32 GEMM calls.
type countingBLAS struct {
	gonum.Implementation
	n *int
}

func (c countingBLAS) Sgemm(tA, tB blas.Transpose, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, cc []float32, ldc int) {
	*c.n++
	c.Implementation.Sgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
}

// TestRegisteredBLASUnused checks that the executor does not go through
// the float32 BLAS registered with gonum (blas32.Use).
func TestRegisteredBLASUnused(t *testing.T) {
	m, err := models.NewMLP([3]int{1, 2, 2}, []int{3}, 2, nn.Tanh, 1)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(m, Options{NonPrivate: true, MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	blas32.Use(countingBLAS{n: &calls})
	defer blas32.Use(gonum.Implementation{})
	if _, err := e.ClippedSum(make([]float32, 8), []int{0, 1}, make([]float32, m.NumParams())); err != nil {
		t.Fatal(err)
	}
	// The executor calls package blas directly: nothing goes through
	// the BLAS registered for gonum.
	if calls != 0 {
		t.Errorf("%d float32 GEMM calls through the registered BLAS, want 0", calls)
	}
}
