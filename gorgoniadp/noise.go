package gorgoniadp

import (
	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/noise"
	"gorgonia.org/tensor"
)

// NextDense fills the gorgonia tensor dst with the next step's noise W_i
// (noise.Source.Next), for a training loop written with gorgonia. dst is
// a float32 tensor of s.Dim() values held contiguously in row-major
// order: a tensor of its own (tensor.New), or a contiguous slice of one,
// such as row i of a matrix (m.Slice(tensor.S(i))). A strided or
// transposed view is refused as "not contiguous", and a refusal does not
// advance s. Several parameter tensors that view one flat vector
// (Model.Views) are filled by one Next on that vector.
func NextDense(s noise.Source, dst *tensor.Dense) error {
	if dst == nil {
		return dpcore.Invalid("gorgoniadp", "next dense: nil tensor")
	}
	if dst.Dtype() != tensor.Float32 {
		return dpcore.Invalid("gorgoniadp", "next dense: tensor of %v, want float32", dst.Dtype())
	}
	data, ok := dst.Data().([]float32)
	if !ok || dst.RequiresIterator() || len(data) != dst.Size() {
		return dpcore.Invalid("gorgoniadp", "next dense: tensor of shape %v is not contiguous (a strided or transposed view): give a tensor of its own or a slice of whole rows", dst.Shape())
	}
	if len(data) != s.Dim() {
		return dpcore.Invalid("gorgoniadp", "next dense: tensor of shape %v holds %d values, the source %d", dst.Shape(), len(data), s.Dim())
	}
	return s.Next(data)
}
