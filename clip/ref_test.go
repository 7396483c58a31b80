package clip

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// refLoss is an independent float64 forward pass of the sequential models
// (convolutions of any kernel, stride and padding, max pools, dense
// layers, with the layers' tanh, ReLU or identity), used as the
// finite-difference reference. It reads only the layer list's shapes and
// the parameters' places, not the executor.
func refLoss(m models.Model, p []float64, x []float64, y int) float64 {
	net := m.Network()
	C, H, W := net.Input.C, net.Input.H, net.Input.W
	cur := x
	for _, l := range net.Layers {
		switch l := l.(type) {
		case nn.Conv2D:
			K, S, P, fo := l.Kernel, l.Stride, l.Pad, l.Out
			h2, w2 := (H+2*P-K)/S+1, (W+2*P-K)/S+1
			out := make([]float64, fo*h2*w2)
			for o := range fo {
				for r := range h2 {
					for c := range w2 {
						s := p[l.Bias.Offset+o]
						for ch := range C {
							for kr := range K {
								for kc := range K {
									rr, cc := r*S+kr-P, c*S+kc-P
									if rr < 0 || rr >= H || cc < 0 || cc >= W {
										continue
									}
									s += cur[ch*H*W+rr*W+cc] * p[l.Weight.Offset+((ch*K+kr)*K+kc)*fo+o]
								}
							}
						}
						out[o*h2*w2+r*w2+c] = refAct(l.Act, s)
					}
				}
			}
			cur, C, H, W = out, fo, h2, w2
		case nn.MaxPool:
			k := l.Size
			h2, w2 := H/k, W/k
			pool := make([]float64, C*h2*w2)
			for ch := range C {
				for r := range h2 {
					for c := range w2 {
						mx := math.Inf(-1)
						for dr := range k {
							for dc := range k {
								mx = max(mx, cur[ch*H*W+(k*r+dr)*W+k*c+dc])
							}
						}
						pool[ch*h2*w2+r*w2+c] = mx
					}
				}
			}
			cur, H, W = pool, h2, w2
		case nn.Flatten:
			C, H, W = C*H*W, 1, 1
		case nn.Dense:
			fi, fo := len(cur), l.Out
			out := make([]float64, fo)
			for o := range fo {
				s := p[l.Bias.Offset+o]
				for k := range fi {
					s += cur[k] * p[l.Weight.Offset+k*fo+o]
				}
				out[o] = refAct(l.Act, s)
			}
			cur, C = out, fo
		default:
			panic(fmt.Sprintf("refLoss: layer %T", l))
		}
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

func refAct(a nn.Activation, s float64) float64 {
	switch a {
	case nn.Identity:
		return s
	case nn.Tanh:
		return math.Tanh(s)
	case nn.ReLU:
		return max(s, 0)
	}
	panic(fmt.Sprintf("refLoss: activation %v", a))
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
