//go:build !amd64 || purego

package nn

// biasTanh sets z[j] = tanh(z[j] + bias[j]).
func biasTanh(z, bias []float32) {
	z = z[:len(bias)]
	for j, b := range bias {
		z[j] = tanh32(z[j] + b)
	}
}

// add adds x to y (len(y) <= len(x)).
func add(y, x []float32) {
	x = x[:len(y)]
	for k := range y {
		y[k] += x[k]
	}
}

// axpy adds a*x to y (len(y) >= len(x)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for k := range x {
		y[k] += a * x[k]
	}
}

func (s *stage) maxPool2Fast(in, out []float32, arg []int32) bool { return false }
