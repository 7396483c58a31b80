package noise

import (
	"gorgonia.org/tensor"
)

// NextDense fills the gorgonia tensor dst with the next step's noise W_i
// (Source.Next), for a training loop written with gorgonia: dst must be a
// float32 tensor of Dim() values whose data is its own contiguous backing
// (tensor.New, not a strided view). Several parameter tensors that view
// one flat vector (gorgoniadp.Model.Views) are filled by one Next on that
// vector.
func NextDense(s Source, dst *tensor.Dense) error {
	if dst == nil {
		return invalidf("next dense: nil tensor")
	}
	if dst.Dtype() != tensor.Float32 {
		return invalidf("next dense: tensor of %v, want float32", dst.Dtype())
	}
	if dst.RequiresIterator() || dst.IsView() {
		return invalidf("next dense: a strided view of shape %v: give a contiguous tensor", dst.Shape())
	}
	data, ok := dst.Data().([]float32)
	if !ok || len(data) != s.Dim() {
		return invalidf("next dense: tensor of shape %v holds %d values, the source %d", dst.Shape(), dst.Size(), s.Dim())
	}
	return s.Next(data)
}
