package toeplitz

// Internals the external tests check against brute force.
var (
	PackedSens2       = packedSens2
	BLTUnboundedSens2 = bltUnboundedSens2
)

// Column is c_0..c_{n-1} of the BLT p.
func Column(p *BLTParams, n int) []float64 { return p.column(n) }
