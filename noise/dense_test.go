package noise

import (
	"errors"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"gorgonia.org/tensor"
)

// TestNextDense checks that a gorgonia tensor receives exactly the row
// Next gives a twin source with the same seed, and that tensors that are
// not contiguous float32 of Dim values are refused without advancing.
func TestNextDense(t *testing.T) {
	const n, d = 3, 12
	seed := (*dpcore.Seed)([]byte("next dense test seed 0123456789a"))
	a, err := NewIndependent(n, d, Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewIndependent(n, d, Options{Seed: seed})
	want := make([]float32, d)
	if err := b.Next(want); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []*tensor.Dense{
		tensor.New(tensor.WithShape(3, 4), tensor.Of(tensor.Float64)),
		tensor.New(tensor.WithShape(3, 5), tensor.Of(tensor.Float32)),
		nil,
	} {
		if err := NextDense(a, bad); !errors.Is(err, dpcore.ErrInvalid) {
			t.Fatalf("tensor %v: error %v", bad, err)
		}
	}
	big := tensor.New(tensor.WithShape(6, 4), tensor.Of(tensor.Float32))
	view, err := big.Slice(tensor.S(0, 6, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := NextDense(a, view.(*tensor.Dense)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("strided view: error %v", err)
	}
	if a.Step() != 0 {
		t.Fatalf("refused calls advanced the source to step %d", a.Step())
	}
	dst := tensor.New(tensor.WithShape(3, 4), tensor.Of(tensor.Float32))
	if err := NextDense(a, dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range dst.Data().([]float32) {
		if v != want[i] {
			t.Fatalf("entry %d: %v, Next gives %v", i, v, want[i])
		}
	}
}
