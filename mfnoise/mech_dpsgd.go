package mfnoise

import (
	"fmt"

	"gonum.org/v1/gonum/mat"
)

// DPSGD is independent noise: C = I, B = A (SPEC 5.1).
func DPSGD(w Workload) (*Factorization, error) {
	f, _, err := dpsgd(w)
	return f, err
}

func dpsgd(w Workload) (*Factorization, *mat.SymDense, error) {
	a, err := w.Matrix()
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: dpsgd: %w", err)
	}
	n := w.N
	c := mat.NewDense(n, n, nil)
	x := mat.NewSymDense(n, nil)
	for i := 0; i < n; i++ {
		c.Set(i, i, 1)
		x.SetSym(i, i, 1)
	}
	f, err := NewFactorization(w, c, a, Metadata{Kind: "dpsgd", Decoder: "workload"})
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: dpsgd: %w", err)
	}
	return f, x, nil
}
