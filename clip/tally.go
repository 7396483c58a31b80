package clip

import "math"

// Tally adds up the Stats of a batch whose clipped sum was computed in
// chunks (the sum is additive; the trainer's engine calls, a distributed
// worker's chunks, the workers' parts): counts add, the loss and the
// clipped fraction are weighted by each chunk's examples and units (the
// loss is then the batch's mean when no example is non-finite), and the
// norm quantiles are the chunks' largest (at least the batch's, exact for
// the maximum). The zero Tally is empty.
type Tally struct {
	// Examples and Units are the chunks' weights added up.
	Examples, Units int
	// LossSum and ClippedSum are the sums of Loss times examples and
	// Clipped times units.
	LossSum, ClippedSum           float64
	NonFinite, Zeroed, WithinNorm int
	NormQuantiles                 [4]float64
}

// Add adds a chunk's Stats, weighted by its examples (for the mean loss)
// and units (examples, or users at user level, for the clipped fraction).
func (t *Tally) Add(st Stats, examples, units int) {
	t.Merge(Tally{
		Examples: examples, Units: units,
		LossSum: st.Loss * float64(examples), ClippedSum: st.Clipped * float64(units),
		NonFinite: st.NonFinite, Zeroed: st.Zeroed, WithinNorm: st.WithinNorm,
		NormQuantiles: st.NormQuantiles,
	})
}

// Merge adds another Tally (a distributed worker's part of a batch).
func (t *Tally) Merge(o Tally) {
	t.Examples += o.Examples
	t.Units += o.Units
	t.LossSum += o.LossSum
	t.ClippedSum += o.ClippedSum
	t.NonFinite += o.NonFinite
	t.Zeroed += o.Zeroed
	t.WithinNorm += o.WithinNorm
	for q := range t.NormQuantiles {
		t.NormQuantiles[q] = math.Max(t.NormQuantiles[q], o.NormQuantiles[q])
	}
}

// Stats are the batch's statistics: Examples and the counts added up,
// Loss the examples' mean, Clipped the units' fraction (0 for an empty
// Tally), NormQuantiles the chunks' largest.
func (t Tally) Stats() Stats {
	st := Stats{Examples: t.Examples, NonFinite: t.NonFinite, Zeroed: t.Zeroed, WithinNorm: t.WithinNorm, NormQuantiles: t.NormQuantiles}
	if t.Examples > 0 {
		st.Loss = t.LossSum / float64(t.Examples)
	}
	if t.Units > 0 {
		st.Clipped = t.ClippedSum / float64(t.Units)
	}
	return st
}
