package gorgoniadp

import (
	"errors"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/noise"
	"gorgonia.org/tensor"
)

// TestNextDense checks that a gorgonia tensor, of its own or a contiguous
// slice of whole rows of a bigger one, receives exactly the rows Next
// gives a twin source with the same seed (and that the rest of the bigger
// tensor is untouched), and that tensors that are not contiguous float32
// of Dim values are refused, saying "not contiguous" for strided and
// transposed views, without advancing the source.
func TestNextDense(t *testing.T) {
	const n, d = 3, 12
	seed := (*dpcore.Seed)([]byte("next dense test seed 0123456789a"))
	a, err := noise.NewIndependent(n, d, noise.Options{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := noise.NewIndependent(n, d, noise.Options{Seed: seed})
	want := make([][]float32, 2)
	for i := range want {
		want[i] = make([]float32, d)
		if err := b.Next(want[i]); err != nil {
			t.Fatal(err)
		}
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
	slice := func(m *tensor.Dense, s ...tensor.Slice) *tensor.Dense {
		t.Helper()
		v, err := m.Slice(s...)
		if err != nil {
			t.Fatal(err)
		}
		return v.(*tensor.Dense)
	}
	big := tensor.New(tensor.WithShape(6, 4), tensor.Of(tensor.Float32))
	tall := tensor.New(tensor.WithShape(d, 2), tensor.Of(tensor.Float32))
	tr := tensor.New(tensor.WithShape(4, 3), tensor.Of(tensor.Float32))
	tr.T()
	for name, bad := range map[string]*tensor.Dense{
		"every other row": slice(big, tensor.S(0, 6, 2)),
		"a column":        slice(tall, nil, tensor.S(1)),
		"a transpose":     tr,
	} {
		err := NextDense(a, bad)
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "not contiguous") {
			t.Fatalf("%s: error %v, want one saying not contiguous", name, err)
		}
	}
	if a.Step() != 0 {
		t.Fatalf("refused calls advanced the source to step %d", a.Step())
	}
	dst := tensor.New(tensor.WithShape(3, 4), tensor.Of(tensor.Float32))
	if err := NextDense(a, dst); err != nil {
		t.Fatal(err)
	}
	for i, v := range dst.Data().([]float32) {
		if v != want[0][i] {
			t.Fatalf("entry %d: %v, Next gives %v", i, v, want[0][i])
		}
	}
	// Rows 1..3 of a 6x4 matrix (the second noise row lands there).
	rows := tensor.New(tensor.WithShape(6, 4), tensor.Of(tensor.Float32))
	if err := NextDense(a, slice(rows, tensor.S(1, 4))); err != nil {
		t.Fatalf("contiguous row slice refused: %v", err)
	}
	all := rows.Data().([]float32)
	for i, v := range all {
		w := float32(0)
		if i >= 4 && i < 16 {
			w = want[1][i-4]
		}
		if v != w {
			t.Fatalf("matrix entry %d: %v, want %v", i, v, w)
		}
	}
}
