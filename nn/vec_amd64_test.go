//go:build amd64 && !purego

package nn

// biasTanhOne is biasTanh's value for one entry as its AVX2 kernel
// computes it (tanh32's without AVX2), for tests of the other widths.
func biasTanhOne(z, bias float32) float32 {
	if !hasAVX2FMA {
		return tanh32(z + bias)
	}
	var d, zv, bv [8]float32
	zv[0], bv[0] = z, bias
	biasTanhAVX2(&d[0], &zv[0], &bv[0], 8)
	return d[0]
}
