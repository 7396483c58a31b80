package nn

import "testing"

// TestNoPrefetch: plans whose products do not prefetch their packed
// right operands (Options.noPrefetch) give the per-example gradients,
// losses and sums of the default plan bit for bit, on every test network
// with a convolution (the prefetch moves no value, only when a line
// arrives).
func TestNoPrefetch(t *testing.T) {
	samePlansOnNets(t, 41, func(o *Options) { o.noPrefetch = true }, func(s *stage) bool { return s.kind == kConv }, "is a convolution")
}
