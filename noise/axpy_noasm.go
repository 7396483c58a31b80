//go:build !amd64 || purego

package noise

const useAVX2 = false

func axpy4AVX2(a, b, c, e float32, x, u, v, w, y []float32) {
	panic("unreachable")
}
