//go:build !amd64 || purego

package nn

// biasTanh sets z[j] = tanh(z[j] + bias[j]).
func biasTanh(z, bias []float32) { biasTanhTo(z, z, bias) }

// biasTanhTo sets dst[j] = tanh(z[j] + bias[j]) (dst may be z).
func biasTanhTo(dst, z, bias []float32) {
	dst, z = dst[:len(bias)], z[:len(bias)]
	for j, b := range bias {
		dst[j] = tanh32(z[j] + b)
	}
}

// add adds x to y (len(y) <= len(x)).
func add(y, x []float32) {
	x = x[:len(y)]
	for k := range y {
		y[k] += x[k]
	}
}

// addTo sets z = x + y (len(x), len(y) >= len(z)).
func addTo(z, x, y []float32) {
	x, y = x[:len(z)], y[:len(z)]
	for k := range z {
		z[k] = x[k] + y[k]
	}
}

// axpy adds a*x to y (len(y) >= len(x)).
func axpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for k := range x {
		y[k] += a * x[k]
	}
}

func (s *stage) maxPool2Fast(in, out []float32, ost int, arg []int32) bool { return false }

func chanStats(x []float32, C int, shift, s1, s2 []float64) {
	chanStatsGo(x, C, 0, shift, s1, s2)
}

func normApply(in, out, xh []float32, C int, mean, r []float64, gamma, beta []float32, relu bool) {
	normApplyGo(in, out, xh, C, 0, mean, r, gamma, beta, relu)
}

func normSums(dy, act, xh []float32, C int, sa, sb []float64) {
	normSumsGo(dy, act, xh, C, 0, sa, sb)
}

func normDx(dy, xh, dx []float32, C int, a, b, e []float64) {
	normDxGo(dy, xh, dx, C, 0, a, b, e)
}

func chanSums(x []float32, C int, s []float64) { chanSumsGo(x, C, 0, s) }

func allFinite(v []float32) bool { return allFiniteGo(v) }

func (acc *sumsqLanes) add(v []float32) { acc.addGo(v) }

const hasAVX2FMA = false

func addScaledDown(acc, v []float32, c float64) { addScaledDownGo(acc, v, c) }

func actGradToFast(dst, g, a []float32, relu bool) int { return 0 }

func poolBack2Fast(C int, act Activation) bool { return false }

func poolBack2Row(dst0, dst1, a0, a1, g []float32, arg []int32, base, C, wc int, act Activation) {
	panic("nn: poolBack2Row without a vector kernel")
}

func poolBack2Out(dst0, dst1, o, g []float32, arg []int32, base, C, wc int, act Activation) {
	panic("nn: poolBack2Out without a vector kernel")
}

func widenFast(d []float64, v []float32) int { return 0 }
