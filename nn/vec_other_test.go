//go:build !amd64 || purego

package nn

// biasTanhOne is biasTanh's value for one entry.
func biasTanhOne(z, bias float32) float32 { return tanh32(z + bias) }
