//go:build !amd64 || purego

package nn

// biasTanh sets z[j] = tanh(z[j] + bias[j]).
func biasTanh(z, bias []float32) {
	z = z[:len(bias)]
	for j, b := range bias {
		z[j] = tanh32(z[j] + b)
	}
}
