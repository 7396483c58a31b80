package clip

import (
	"math"
	"math/rand/v2"
	"strings"

	"testing"

	"github.com/dpmf-go/dpmf/models"
)

// refLoss is an independent float64 forward pass of the sequential models
// (dense layers, or 3x3 'same' convolutions with a 2x2 max pool after every
// second one), used as the finite-difference reference.
func refLoss(m models.Model, p []float64, x []float64, y int, act string) float64 {
	lay := m.Layout()
	in := m.InputShape()
	C, H, W := in[0], in[1], in[2]
	cur := x
	nconv := 0
	for l := 0; l < len(lay); l += 2 {
		w, b := lay[l], lay[l+1]
		fi, fo := w.Shape[0], w.Shape[1]
		last := l+2 == len(lay)
		if strings.HasPrefix(w.Name, "conv") {
			out := make([]float64, fo*H*W)
			for o := range fo {
				for r := range H {
					for c := range W {
						s := p[b.Offset+o]
						for ch := range C {
							for kr := range 3 {
								for kc := range 3 {
									rr, cc := r+kr-1, c+kc-1
									if rr < 0 || rr >= H || cc < 0 || cc >= W {
										continue
									}
									s += cur[ch*H*W+rr*W+cc] * p[w.Offset+(ch*9+kr*3+kc)*fo+o]
								}
							}
						}
						out[o*H*W+r*W+c] = math.Tanh(s)
					}
				}
			}
			cur, C = out, fo
			nconv++
			if nconv%2 == 0 {
				h2, w2 := H/2, W/2
				pool := make([]float64, C*h2*w2)
				for ch := range C {
					for r := range h2 {
						for c := range w2 {
							mx := math.Inf(-1)
							for dr := range 2 {
								for dc := range 2 {
									mx = max(mx, cur[ch*H*W+(2*r+dr)*W+2*c+dc])
								}
							}
							pool[ch*h2*w2+r*w2+c] = mx
						}
					}
				}
				cur, H, W = pool, h2, w2
			}
			continue
		}
		out := make([]float64, fo)
		for o := range fo {
			s := p[b.Offset+o]
			for k := range fi {
				s += cur[k] * p[w.Offset+k*fo+o]
			}
			switch {
			case last:
			case act == "relu":
				s = max(s, 0)
			default:
				s = math.Tanh(s)
			}
			out[o] = s
		}
		cur = out
	}
	mx := math.Inf(-1)
	for _, v := range cur {
		mx = max(mx, v)
	}
	s := 0.0
	for _, v := range cur {
		s += math.Exp(v - mx)
	}
	return mx + math.Log(s) - cur[y]
}

// perExample returns each example's unclipped gradient from one batched
// pass of the executor.
func perExample(t *testing.T, e *Engine, x []float32, y []int) [][]float32 {
	t.Helper()
	out := make([][]float32, len(y))
	for i := range out {
		out[i] = make([]float32, e.m.NumParams())
	}
	if _, err := e.plan.Gradients(x, y, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func randBatch(rng *rand.Rand, n, chw, classes int) ([]float32, []int) {
	x := make([]float32, n*chw)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int, n)
	for i := range y {
		y[i] = rng.IntN(classes)
	}
	return x, y
}

func sqnorm(v []float32) float64 {
	s := 0.0
	for _, x := range v {
		s += float64(x) * float64(x)
	}
	return s
}

func maxabs(v []float32) float64 {
	m := 0.0
	for _, x := range v {
		m = max(m, math.Abs(float64(x)))
	}
	return m
}

func norm32(v []float32) float64 { return math.Sqrt(sqnorm(v)) }

// relDiff is ||a-b|| / max(||b||, tiny).
func relDiff(a, b []float32) float64 {
	d := 0.0
	for i := range a {
		t := float64(a[i]) - float64(b[i])
		d += t * t
	}
	return math.Sqrt(d) / max(norm32(b), 1e-30)
}
