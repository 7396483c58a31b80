package nn

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/internal/rusage"
	gblas "gonum.org/v1/gonum/blas"
)

// TestStepProducts checks the products a step logs against the count the
// layers' shapes give: for a convolution of P output pixels, fan-in fi and
// fan-out fo on n examples, the forward product and the input gradient
// (except on the first layer) each make 2 n P fi fo flops, and so does the
// weight gradient (per example on the private path, per chunk otherwise);
// a dense layer the same with P = 1. (An implicit convolution's P counts
// the garbage columns of its wide rows, and its forward and input-gradient
// products the rows up to a multiple of implicitRows.) TimeProducts must
// time them all.
func TestStepProducts(t *testing.T) {
	b := &builder{net: Network{Input: Shape{3, 8, 8}}}
	b.conv(3, 8, 3, 1, 1, Tanh)
	b.conv(8, 16, 3, 1, 1, ReLU)
	b.net.Layers = append(b.net.Layers, MaxPool{2}, Flatten{})
	b.dense(16*4*4, 10, Identity)
	rng := rand.New(rand.NewPCG(3, 4))
	params := randParams(rng, b.n)
	const n = 7
	p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, y := randomBatch(rng, b.net.Input.Size(), n, 10)
	dst := make([]float32, b.n)
	// Both convolutions run implicitly (implicit.go): 7 rows of 10
	// (the 8 columns and 2 of garbage) and the last row's 8 columns; the
	// forward and input-gradient products compute 84 rows (6 more).
	for i := range 2 {
		if !p.stages[i].implicit {
			t.Fatalf("stage %d is not implicit", i)
		}
	}
	// On the private path the first layer's per-example weight gradient
	// computes 12 rows for each kernel row's 9 (36 for its 27). The
	// weight gradients skip the garbage columns: 64 steps of their 78;
	// the forward and input-gradient products skip the garbage rows
	// where the products' row tile divides the map's 8 columns.
	const P = 8 * 8
	var tile blas.PackedB32 // a weight packed as the step packs them
	blas.PackB32(gblas.NoTrans, 9, 8, 1, make([]float32, 72), 8, &tile)
	PM := 84
	if rt := tile.RowTile(); rt > 0 && 8%rt == 0 {
		PM = P
	}
	layer := func(P, PM, fi, fo, fiW int, first bool) float64 {
		f := 2.0 * n * float64(fo)
		if first {
			return f * float64(PM*fi+P*fiW)
		}
		return f * float64(2*PM*fi+P*fiW)
	}
	for _, private := range []bool{false, true} {
		fiW := 27
		if private {
			fiW = 36
		}
		want := layer(P, PM, 27, 8, fiW, true) + layer(P, PM, 72, 16, 72, false) + layer(1, 1, 256, 10, 256, false)
		var cl Clipper
		if private {
			cl = &testClipper{}
		}
		p.RecordProducts(true)
		if _, err := p.Step(x, y, dst, cl); err != nil {
			t.Fatal(err)
		}
		list := p.Products()
		p.RecordProducts(false)
		if len(p.Products()) != 0 {
			t.Error("products logged after RecordProducts(false)")
		}
		got := 0.0
		inStep := time.Duration(0)
		for _, q := range list {
			got += float64(q.Count) * q.Flops()
			inStep += q.InStep
		}
		if _, clock := rusage.ThreadCPU(); clock && inStep <= 0 {
			t.Errorf("private %v: the products took %v in the step by the thread clock", private, inStep)
		}
		if got != want {
			t.Errorf("private %v: products of %v flops, want %v: %+v", private, got, want, list)
		}
		d, err := p.TimeProducts(list, time.Millisecond)
		if err != nil || d <= 0 {
			t.Errorf("private %v: TimeProducts = %v, %v", private, d, err)
		}
		// The step logged is a step: the same sum as one not logged.
		again := make([]float32, b.n)
		if _, err := p.Step(x, y, again, cl); err != nil {
			t.Fatal(err)
		}
		for k := range again {
			if again[k] != dst[k] {
				t.Fatalf("private %v: the logged step's sum differs at %d", private, k)
			}
		}
	}
	if _, err := p.TimeProducts([]Product{{M: 2, N: 2, K: 2, LDA: 0, LDB: 2, LDC: 2, Count: 1}}, 0); err == nil {
		t.Error("a leading dimension of 0 was accepted")
	}
	// Products whose right operand and output are as long as the
	// implicit convolutions' zero-bordered maps leave those maps alone:
	// no step rewrites their borders (TimeProducts once wrote its
	// products into them, and the steps after were wrong).
	var list []Product
	for _, set := range [][][]float32{p.workers[0].xp, p.workers[0].gp} {
		for _, m := range set {
			if len(m) > 0 {
				list = append(list, Product{M: 1, N: len(m), K: 1, LDA: 1, LDB: len(m), LDC: len(m), Count: 1})
			}
		}
	}
	if len(list) == 0 {
		t.Fatal("no bordered map")
	}
	before := make([]float32, b.n)
	if _, err := p.Step(x, y, before, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.TimeProducts(list, 0); err != nil {
		t.Fatal(err)
	}
	after := make([]float32, b.n)
	if _, err := p.Step(x, y, after, nil); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "the sum after timing products", after, before)
}

// TestSeqStepProducts checks the products a SeqPlan step logs: a step
// over n examples of one length makes n times the products of a step over
// one of them, shape for shape; the float64 ones (the ghost norms' Gram
// matrices) appear exactly when the plan has ghost weights; logging does
// not change the sum; TimeProducts times them all.
func TestSeqStepProducts(t *testing.T) {
	for _, ci := range []int{0, 1, 4} {
		c := seqCases[ci]
		tr, params := c.build(uint64(ci))
		const n = 4
		x := make([]float32, n*tr.Context)
		rng := rand.New(rand.NewPCG(5, 6))
		for k := range x {
			x[k] = float32(rng.IntN(tr.Vocab))
		}
		y := make([]int, n)
		p, err := NewSeqPlan(tr, params, Options{MaxBatch: n, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		cl := &testClipper{}
		dst := make([]float32, len(params))
		count := func(m int) (map[Product]int, []Product) {
			p.RecordProducts(true)
			if _, err := p.Step(x[:m*tr.Context], y[:m], dst, cl); err != nil {
				t.Fatal(err)
			}
			list := p.Products()
			p.RecordProducts(false)
			got := map[Product]int{}
			for _, q := range list {
				k := q
				k.Count, k.InStep = 0, 0
				got[k] += q.Count
			}
			return got, list
		}
		one, _ := count(1)
		all, list := count(n)
		if len(one) == 0 || len(one) != len(all) {
			t.Fatalf("%s: %d shapes for one example, %d for %d", c.name, len(one), len(all), n)
		}
		f64 := false
		for k, v := range one {
			if all[k] != n*v {
				t.Errorf("%s: %+v made %d times for %d examples, %d for one", c.name, k, all[k], n, v)
			}
			f64 = f64 || k.Float64
		}
		if f64 != (p.Ghost() > 0) {
			t.Errorf("%s: float64 products %v with %d ghost weights", c.name, f64, p.Ghost())
		}
		again := make([]float32, len(params))
		if _, err := p.Step(x, y, again, cl); err != nil {
			t.Fatal(err)
		}
		for k := range again {
			if again[k] != dst[k] {
				t.Fatalf("%s: the logged step's sum differs at %d", c.name, k)
			}
		}
		if d, err := p.TimeProducts(list, time.Millisecond); err != nil || d <= 0 {
			t.Errorf("%s: TimeProducts = %v, %v", c.name, d, err)
		}
		if len(p.Products()) != 0 {
			t.Errorf("%s: products logged after RecordProducts(false)", c.name)
		}
	}
}

// TestBoundSums checks that Bound sums each product's time alone, logs
// one line a product and the totals, and passes on a timing error.
func TestBoundSums(t *testing.T) {
	list := []Product{{M: 2, N: 3, K: 4, Count: 2, InStep: 5 * time.Microsecond}, {M: 8, N: 8, K: 8, Count: 1, InStep: time.Microsecond}}
	timeOf := func(l []Product, _ time.Duration) (time.Duration, error) {
		if len(l) != 1 {
			t.Fatalf("timed %d products at once", len(l))
		}
		return time.Duration(l[0].M*l[0].Count) * time.Microsecond, nil
	}
	var lines []string
	got, err := Bound(list, timeOf, func(f string, a ...any) { lines = append(lines, fmt.Sprintf(f, a...)) })
	if err != nil || got != 12*time.Microsecond {
		t.Fatalf("Bound = %v, %v, want 12µs", got, err)
	}
	if len(lines) != 3 || !strings.Contains(lines[2], "in the step 6µs (x0.50)") {
		t.Errorf("logged %q", lines)
	}
	bad := errors.New("no clock")
	if _, err := Bound(list, func([]Product, time.Duration) (time.Duration, error) { return 0, bad }, nil); !errors.Is(err, bad) {
		t.Errorf("error %v, want %v", err, bad)
	}
}
