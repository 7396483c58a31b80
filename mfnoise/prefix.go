package mfnoise

import (
	"context"
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// PrefixSensitivity is an upper bound on the sensitivity under the schema
// of the first t releases of strategy s alone, nondecreasing in t and at
// most full (s's sensitivity under the schema): what a service that
// releases step by step has spent so far.
//
// The first t releases are B[:t,:] (C X + Z) = (A X)[:t] + (B Z)[:t]:
// post-processing of the rows R of C X + Z that B[:t,:] reads: the rows
// with an entry above the structural-zero cut-off (StructuralZeroCutoff,
// the rule the exact release's decoder reads rows by). Their sensitivity
// is that of C[R,:] under the schema (columns past the last nonzero entry
// dropped, which changes nothing), at most sens(C); R grows with t, so
// the bound is nondecreasing. For an optimal (non-causal) decoder R
// is every row and the bound is sens(C). It reads the dense encoder and
// decoder (s.Matrices).
func PrefixSensitivity(ctx context.Context, s dpcore.Strategy, schema dpcore.Schema, t int, full float64) (float64, error) {
	n := s.Steps()
	if t <= 0 {
		return 0, nil
	}
	if t >= n {
		return full, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("mfnoise: prefix sensitivity: %w", err)
	}
	c, b, err := s.Matrices()
	if err != nil {
		return 0, err
	}
	rows, cols := c.Dims()
	cut := StructuralZeroCutoff(b)
	used := make([]bool, rows)
	for i := 0; i < t; i++ {
		for j, v := range b.RawRowView(i) {
			if math.Abs(v) > cut {
				used[j] = true
			}
		}
	}
	var r []int
	last := 0
	for j, u := range used {
		if !u {
			continue
		}
		r = append(r, j)
		for k := cols - 1; k >= last; k-- {
			if c.At(j, k) != 0 {
				last = k + 1
				break
			}
		}
	}
	if len(r) == 0 || last == 0 {
		return 0, nil
	}
	// Zero rows pad the slice to at least as many rows as columns, which
	// Sensitivity requires and which change no column norm.
	sub := mat.NewDense(max(len(r), last), last, nil)
	for i, j := range r {
		copy(sub.RawRowView(i), c.RawRowView(j)[:last])
	}
	v, err := sensitivity.Of(sub, schema)
	if err != nil {
		return 0, fmt.Errorf("mfnoise: prefix sensitivity at t = %d: %w", t, err)
	}
	return math.Min(v.Value, full), nil
}
