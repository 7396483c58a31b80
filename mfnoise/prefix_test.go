package mfnoise

import (
	"context"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/gonum/mat"
)

// PrefixSensitivity counts a row as read by the prefix when the decoder's
// entry is above the one structural-zero cut-off, StructuralZeroCutoff
// (1e-13 times the largest entry), the rule the exact release reads rows
// by. The encoder here is the identity with a copy of x_1 as an extra row
// (n+1 rows), and the prefix-sum decoder's first row also reads that copy
// with weight 5e-12: 50 times the cut-off, but below 1e-13 times B's
// largest row sum (n), the cut-off PrefixSensitivity used before. The
// first release then reads two rows holding x_1, sensitivity sqrt 2; with
// the row-sum cut-off it was reported as 1.
func TestPrefixSensitivityStructuralZeros(t *testing.T) {
	const n = 200
	const weight = 5e-12
	w, err := dpcore.PrefixSum(n)
	if err != nil {
		t.Fatal(err)
	}
	c := mat.NewDense(n+1, n, nil)
	for i := range n {
		c.Set(i, i, 1)
	}
	c.Set(n, 0, 1)
	b := mat.NewDense(n, n+1, nil)
	for i := range n {
		for j := 0; j <= i; j++ {
			b.Set(i, j, 1)
		}
	}
	b.Set(0, n, weight)
	f, err := NewFactorization(w, c, b, Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if cut := StructuralZeroCutoff(b); !(weight > cut) || !(weight <= 1e-13*mat.Norm(b, math.Inf(1))) {
		t.Fatalf("the decoder's weight %v should lie above the cut-off %v and at most 1e-13 ||B||_inf", weight, cut)
	}
	single := dpcore.SingleParticipation()
	full, err := f.Sensitivity(single)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prev := 0.0
	for _, step := range []int{1, 2, 50, n} {
		got, err := PrefixSensitivity(ctx, f, single, step, full.Value)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(got-math.Sqrt2) > 1e-15 || got < prev || got > full.Value {
			t.Fatalf("prefix %d: sensitivity %v, want sqrt 2 (the rows the release reads: x_1 twice), nondecreasing, at most %v", step, got, full.Value)
		}
		prev = got
	}
	// Below the cut-off the copy is not read: x_1 once.
	b.Set(0, n, StructuralZeroCutoff(b)/2)
	if got, err := PrefixSensitivity(ctx, f, single, 1, full.Value); err != nil || got != 1 {
		t.Fatalf("decoder entry below the cut-off: prefix sensitivity %v (%v), want 1", got, err)
	}
}
