package nn

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// refLoss is an independent float64 forward pass of net on one example x
// (CHW) with label y: direct convolution loops, no im2col, no permutation.
func refLoss(net Network, p []float64, x []float64, y int) float64 {
	return refLossDrop(net, p, x, y, nil)
}

// refLossDrop is refLoss with dropout masks drop(layer, element) for a
// network without residual blocks (layer index = stage index).
func refLossDrop(net Network, p []float64, x []float64, y int, drop func(l, k int) float64) float64 {
	cur, _ := refLayers(net.Layers, p, x, net.Input, drop)
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

// refLayers runs layers on one example (CHW) in float64.
func refLayers(layers []Layer, p []float64, cur []float64, sh Shape, drop func(l, k int) float64) ([]float64, Shape) {
	act := func(v float64, a Activation, slope float32) float64 {
		switch a {
		case Sigmoid:
			return 1 / (1 + math.Exp(-v))
		case LeakyReLU:
			if v < 0 {
				return float64(slope) * v
			}
			return v
		case Tanh:
			return math.Tanh(v)
		case ReLU:
			return max(v, 0)
		case GELU:
			return 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
		}
		return v
	}
	norm := func(groups int, eps float64, w, b Param, perElem bool, a Activation) {
		if eps == 0 {
			eps = 1e-5
		}
		HW := sh.H * sh.W
		Cg := sh.C / groups
		next := make([]float64, len(cur))
		for g := range groups {
			blk := cur[g*Cg*HW : (g+1)*Cg*HW]
			mean, vr := 0.0, 0.0
			for _, v := range blk {
				mean += v
			}
			mean /= float64(len(blk))
			for _, v := range blk {
				vr += (v - mean) * (v - mean)
			}
			vr /= float64(len(blk))
			for k := range blk {
				idx := g*Cg*HW + k
				q := idx / HW // channel
				if perElem {
					q = idx
				}
				next[idx] = act(p[w.Offset+q]*(blk[k]-mean)/math.Sqrt(vr+eps)+p[b.Offset+q], a, 0)
			}
		}
		cur = next
	}
	for li, l := range layers {
		switch l := l.(type) {
		case Embedding:
			out, _ := l.out(sh)
			next := make([]float64, out.Size())
			copy(next, cur[:l.Numeric])
			ids := cur[l.Numeric:]
			scale := 1.0
			if l.Bag == MeanBag {
				k := 0
				for _, v := range ids {
					if v != -1 {
						k++
					}
				}
				if k > 0 {
					scale = 1 / float64(k)
				}
			}
			for c, v := range ids {
				if v == -1 {
					continue
				}
				t, off := l.table(c)
				for d := range t.Dim {
					next[off+d] += scale * p[t.Weight.Offset+int(v)*t.Dim+d]
				}
			}
			cur, sh = next, out
		case Dropout:
			next := make([]float64, len(cur))
			for k, v := range cur {
				next[k] = v * drop(li, k)
			}
			cur = next
		case Residual:
			b, bs := refLayers(l.Body, p, cur, sh, nil)
			sc := cur
			if len(l.Shortcut) > 0 {
				sc, _ = refLayers(l.Shortcut, p, cur, sh, nil)
			}
			next := make([]float64, len(b))
			for k := range b {
				next[k] = b[k] + sc[k]
			}
			cur, sh = next, bs
		case Conv2D:
			out, _ := l.out(sh)
			K := l.Kernel
			next := make([]float64, out.Size())
			for o := range out.C {
				for r := range out.H {
					for c := range out.W {
						s := 0.0
						if l.Bias.Len > 0 {
							s = p[l.Bias.Offset+o]
						}
						for ch := range sh.C {
							for kr := range K {
								for kc := range K {
									ih, iw := r*l.Stride-l.Pad+kr, c*l.Stride-l.Pad+kc
									if ih < 0 || ih >= sh.H || iw < 0 || iw >= sh.W {
										continue
									}
									s += cur[ch*sh.H*sh.W+ih*sh.W+iw] * p[l.Weight.Offset+(ch*K*K+kr*K+kc)*out.C+o]
								}
							}
						}
						next[o*out.H*out.W+r*out.W+c] = act(s, l.Act, l.Slope)
					}
				}
			}
			cur, sh = next, out
		case MaxPool:
			cur, sh = refPool(cur, sh, l.Size, func(w []float64) float64 {
				mx := math.Inf(-1)
				for _, v := range w {
					mx = max(mx, v)
				}
				return mx
			})
		case Flatten:
			sh = Shape{sh.Size(), 1, 1}
		case AvgPool:
			cur, sh = refPool(cur, sh, l.Size, func(w []float64) float64 {
				s := 0.0
				for _, v := range w {
					s += v
				}
				return s / float64(len(w))
			})
		case GroupNorm:
			norm(l.Groups, l.Eps, l.Weight, l.Bias, false, l.Act)
		case LayerNorm:
			norm(1, l.Eps, l.Weight, l.Bias, true, l.Act)
		case Dense:
			next := make([]float64, l.Out)
			for o := range l.Out {
				s := 0.0
				if l.Bias.Len > 0 {
					s = p[l.Bias.Offset+o]
				}
				for k := range sh.C {
					s += cur[k] * p[l.Weight.Offset+k*l.Out+o]
				}
				next[o] = act(s, l.Act, l.Slope)
			}
			cur, sh = next, Shape{l.Out, 1, 1}
		}
	}
	return cur, sh
}

// builder lays out parameters for a test network.
// refPool reduces each non-overlapping S x S window of the CHW map cur
// (floor at the edges) with f.
func refPool(cur []float64, sh Shape, S int, f func(window []float64) float64) ([]float64, Shape) {
	out := Shape{sh.C, sh.H / S, sh.W / S}
	next := make([]float64, out.Size())
	win := make([]float64, 0, S*S)
	for ch := range out.C {
		for r := range out.H {
			for c := range out.W {
				win = win[:0]
				for dr := range S {
					for dc := range S {
						win = append(win, cur[ch*sh.H*sh.W+(r*S+dr)*sh.W+c*S+dc])
					}
				}
				next[ch*out.H*out.W+r*out.W+c] = f(win)
			}
		}
	}
	return next, out
}

type builder struct {
	n   int
	net Network
	// input draws one example (default: standard normal values).
	input func(rng *rand.Rand) []float32
}

func (b *builder) param(n int) Param {
	p := Param{b.n, n}
	b.n += n
	return p
}

func (b *builder) conv(in, out, k, stride, pad int, act Activation) {
	w := b.param(k * k * in * out)
	b.net.Layers = append(b.net.Layers, Conv2D{Out: out, Kernel: k, Stride: stride, Pad: pad, Act: act, Weight: w, Bias: b.param(out)})
}

func (b *builder) dense(in, out int, act Activation) {
	w := b.param(in * out)
	b.net.Layers = append(b.net.Layers, Dense{Out: out, Act: act, Weight: w, Bias: b.param(out)})
}

func testNets() map[string]*builder {
	nets := map[string]*builder{}
	// Every layer and option: kernels 1, 2, 3, 5; strides 1, 2, 3;
	// paddings 0, 1, 2; pools 2 and 3 (with floor); tanh, relu, identity.
	b := &builder{net: Network{Input: Shape{2, 9, 9}}}
	b.conv(2, 3, 3, 1, 1, Tanh)
	b.conv(3, 4, 5, 2, 2, ReLU)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2})
	b.conv(4, 3, 1, 1, 0, Identity)
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(3*2*2, 5, Tanh)
	b.dense(5, 3, Identity)
	nets["mixed"] = b
	// The CIFAR CNN's pattern: 'same' convolutions in pairs, each pair
	// pooled, so that input gradients go straight into the producing
	// convolution's bordered map (fuseGrads), with every fused activation,
	// channel counts off the vector width and a column the pool drops.
	b = &builder{net: Network{Input: Shape{3, 8, 7}}}
	b.conv(3, 5, 3, 1, 1, Identity)
	b.conv(5, 4, 3, 1, 1, ReLU)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2})
	b.conv(4, 8, 3, 1, 1, Tanh)
	b.conv(8, 3, 3, 1, 1, Tanh)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2})
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(3*2*1, 4, Tanh)
	b.dense(4, 3, Identity)
	nets["conv-pairs"] = b
	// The same with channel counts the vector pool backward takes (2x2
	// windows written whole, poolWindows2), after Tanh and ReLU, on maps
	// of odd height and width.
	b = &builder{net: Network{Input: Shape{3, 5, 7}}}
	b.conv(3, 8, 3, 1, 1, Tanh)
	b.conv(8, 8, 3, 1, 1, Tanh)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2})
	b.conv(8, 8, 3, 1, 1, ReLU)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 2})
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(8, 3, Identity)
	nets["conv-pairs8"] = b
	b = &builder{net: Network{Input: Shape{1, 11, 10}}}
	b.conv(1, 4, 2, 3, 0, Tanh)
	b.net.Layers = append(b.net.Layers, MaxPool{Size: 3})
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(4, 2, Identity)
	nets["stride3-pool3"] = b
	b = &builder{net: Network{Input: Shape{3, 2, 2}}}
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(12, 6, ReLU)
	b.dense(6, 4, Identity)
	nets["mlp"] = b
	// Normalization, average pooling and GELU (issue 15's layers).
	b = &builder{net: Network{Input: Shape{2, 6, 7}}}
	b.conv(2, 4, 3, 1, 1, GELU)
	b.net.Layers = append(b.net.Layers, GroupNorm{Groups: 2, Act: ReLU, Weight: b.param(4), Bias: b.param(4)})
	b.net.Layers = append(b.net.Layers, AvgPool{Size: 2})
	b.conv(4, 3, 2, 1, 0, Tanh)
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.net.Layers = append(b.net.Layers, LayerNorm{Eps: 1e-3, Weight: b.param(3 * 2 * 2), Bias: b.param(3 * 2 * 2)})
	b.dense(12, 5, GELU)
	b.net.Layers = append(b.net.Layers, LayerNorm{Act: GELU, Weight: b.param(5), Bias: b.param(5)})
	b.dense(5, 3, Identity)
	nets["norms-avgpool-gelu"] = b
	// Sigmoid and LeakyReLU (the activations gorgonia graphs compile to)
	// after convolutions and dense layers.
	b = &builder{net: Network{Input: Shape{2, 6, 6}}}
	b.conv(2, 3, 3, 1, 1, Sigmoid)
	b.net.Layers = append(b.net.Layers, Conv2D{Out: 4, Kernel: 3, Stride: 2, Pad: 1, Act: LeakyReLU, Slope: 0.2, Weight: b.param(27 * 4), Bias: b.param(4)})
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.net.Layers = append(b.net.Layers, Dense{Out: 5, Act: LeakyReLU, Slope: 0.01, Weight: b.param(36 * 5), Bias: b.param(5)})
	b.dense(5, 4, Sigmoid)
	b.dense(4, 3, Identity)
	nets["sigmoid-leakyrelu"] = b
	// Layers without a bias (Bias.Len 0): a convolution as the first
	// layer and in the middle, dense layers with and without one.
	b = &builder{net: Network{Input: Shape{2, 5, 5}}}
	b.net.Layers = append(b.net.Layers, Conv2D{Out: 3, Kernel: 3, Stride: 1, Pad: 1, Act: Tanh, Weight: b.param(18 * 3)})
	b.net.Layers = append(b.net.Layers, Conv2D{Out: 2, Kernel: 2, Stride: 2, Pad: 0, Act: ReLU, Weight: b.param(12 * 2)})
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.net.Layers = append(b.net.Layers, Dense{Out: 4, Act: Sigmoid, Weight: b.param(8 * 4)})
	b.dense(4, 3, Tanh)
	b.net.Layers = append(b.net.Layers, Dense{Out: 3, Weight: b.param(3 * 3)})
	nets["no-bias"] = b
	// The norm kernels' edges: GroupNorm as the first layer (no input
	// gradient) over 6 channels (4 in AVX2, 2 left over), LayerNorm over a
	// map (an affine per element), both with the fused ReLU.
	b = &builder{net: Network{Input: Shape{6, 4, 4}}}
	b.net.Layers = append(b.net.Layers, GroupNorm{Groups: 3, Act: ReLU, Weight: b.param(6), Bias: b.param(6)})
	b.conv(6, 5, 3, 1, 1, Identity)
	b.net.Layers = append(b.net.Layers, LayerNorm{Act: ReLU, Weight: b.param(5 * 4 * 4), Bias: b.param(5 * 4 * 4)})
	b.net.Layers = append(b.net.Layers, AvgPool{Size: 2}, Flatten{})
	b.dense(20, 3, Identity)
	nets["norms-relu-first-map"] = b
	// Residual blocks: identity shortcut (nested, at the network input),
	// and a strided 1x1 convolution shortcut as in WideResNets.
	b = &builder{net: Network{Input: Shape{3, 6, 6}}}
	inner := &builder{n: 0}
	inner.conv(3, 3, 3, 1, 1, Tanh)
	inner.net.Layers = append(inner.net.Layers, GroupNorm{Groups: 3, Act: Tanh, Weight: inner.param(3), Bias: inner.param(3)})
	b.n = inner.n
	outer := inner.net.Layers
	b.net.Layers = append(b.net.Layers, Residual{Body: []Layer{Residual{Body: outer}, Conv2D{Out: 3, Kernel: 3, Stride: 1, Pad: 1, Act: ReLU, Weight: b.param(27 * 3), Bias: b.param(3)}}})
	body := &builder{n: b.n}
	body.conv(3, 4, 3, 2, 1, Tanh)
	body.conv(4, 4, 3, 1, 1, Identity)
	sc := &builder{n: body.n}
	sc.conv(3, 4, 1, 2, 0, Identity)
	b.n = sc.n
	b.net.Layers = append(b.net.Layers, Residual{Body: body.net.Layers, Shortcut: sc.net.Layers}, AvgPool{Size: 3}, Flatten{})
	b.dense(4, 3, Identity)
	nets["residual"] = b
	// A WideResNet downsampling block (pre-activation GroupNorm+ReLU, a
	// stride-2 3x3 convolution without a bias, a strided 1x1 shortcut), a
	// block widening with a 1x1 shortcut (an implicit convolution the
	// join writes the gradient of, fuseJoins), then a stride-2 3x3
	// convolution whose input gradient its reader
	// writes into its bordered map (fuseGrads): stride-2 implicit
	// convolutions (stride2.go), on maps of odd and even half widths.
	b = &builder{net: Network{Input: Shape{4, 8, 12}}}
	blk := &builder{n: 0}
	blk.net.Layers = append(blk.net.Layers, GroupNorm{Groups: 2, Act: ReLU, Weight: blk.param(4), Bias: blk.param(4)},
		Conv2D{Out: 6, Kernel: 3, Stride: 2, Pad: 1, Weight: blk.param(36 * 6)})
	blk.net.Layers = append(blk.net.Layers, GroupNorm{Groups: 3, Act: ReLU, Weight: blk.param(6), Bias: blk.param(6)})
	blk.conv(6, 6, 3, 1, 1, Identity)
	sc = &builder{n: blk.n}
	sc.conv(4, 6, 1, 2, 0, Identity)
	b.n = sc.n
	b.net.Layers = append(b.net.Layers, Residual{Body: blk.net.Layers, Shortcut: sc.net.Layers})
	blk = &builder{n: b.n}
	blk.net.Layers = append(blk.net.Layers, GroupNorm{Groups: 2, Act: ReLU, Weight: blk.param(6), Bias: blk.param(6)})
	blk.conv(6, 8, 3, 1, 1, Identity)
	sc = &builder{n: blk.n}
	sc.conv(6, 8, 1, 1, 0, Identity)
	b.n = sc.n
	b.net.Layers = append(b.net.Layers, Residual{Body: blk.net.Layers, Shortcut: sc.net.Layers})
	b.conv(8, 5, 3, 2, 1, Tanh)
	b.conv(5, 5, 3, 1, 1, Identity)
	b.net.Layers = append(b.net.Layers, AvgPool{Size: 2}, Flatten{})
	b.dense(5, 3, Identity)
	nets["stride2"] = b
	// Convolutions whose per-example weight gradients are recomputed
	// (recompute.go: im2col layers of few output pixels and outputs a
	// multiple of 16), with a bias and without; the second and third
	// take ghost norms unless Options.LInf is set (recompute.go).
	b = &builder{net: Network{Input: Shape{3, 6, 6}}}
	b.conv(3, 16, 3, 2, 1, ReLU)
	b.conv(16, 32, 2, 1, 0, Tanh)
	b.net.Layers = append(b.net.Layers, Conv2D{Out: 32, Kernel: 1, Stride: 2, Pad: 0, Act: Identity, Weight: b.param(32 * 32)}, Flatten{})
	b.dense(32, 3, Identity)
	nets["recomputed"] = b
	// Embeddings: tabular (2 numeric columns, 3 categorical with their
	// own tables), a mean bag of up to 6 ids with -1 padding, and a
	// sequence sharing one table (repeated ids).
	b = &builder{net: Network{Input: Shape{5, 1, 1}}}
	tabs := []EmbeddingTable{{Vocab: 4, Dim: 2}, {Vocab: 3, Dim: 3}, {Vocab: 5, Dim: 2}}
	for k := range tabs {
		tabs[k].Weight = b.param(tabs[k].Vocab * tabs[k].Dim)
	}
	b.net.Layers = append(b.net.Layers, Embedding{Numeric: 2, Tables: tabs})
	b.dense(2+7, 4, Tanh)
	b.dense(4, 3, Identity)
	b.input = func(rng *rand.Rand) []float32 {
		return []float32{float32(rng.NormFloat64()), float32(rng.NormFloat64()), float32(rng.IntN(4)), float32(rng.IntN(3)), float32(rng.IntN(5))}
	}
	nets["embedding-tabular"] = b
	for _, bag := range []Bag{MeanBag, SumBag, NoBag} {
		b = &builder{net: Network{Input: Shape{6, 1, 1}}}
		tab := EmbeddingTable{Vocab: 4, Dim: 3, Weight: b.param(12)}
		b.net.Layers = append(b.net.Layers, Embedding{Tables: []EmbeddingTable{tab}, Bag: bag})
		out := 3
		if bag == NoBag {
			out = 18
		}
		b.dense(out, 2, Identity)
		b.input = func(rng *rand.Rand) []float32 {
			x := make([]float32, 6)
			k := 1 + rng.IntN(6)
			for c := range x {
				x[c] = -1
				if c < k {
					x[c] = float32(rng.IntN(4)) // repeats are likely
				}
			}
			return x
		}
		nets[fmt.Sprintf("embedding-bag%d", bag)] = b
	}
	return nets
}

func TestBatchNormRefused(t *testing.T) {
	net := Network{Input: Shape{3, 4, 4}, Layers: []Layer{BatchNorm{}, Flatten{}}}
	_, err := NewPlan(net, nil, Options{MaxBatch: 1})
	if !errors.Is(err, ErrBatchNorm) || !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "GroupNorm") {
		t.Errorf("error %v, want ErrBatchNorm naming GroupNorm", err)
	}
}

// batch draws n examples of the network's input (standard normal values,
// or b.input's) and their labels in [0, classes).
func (b *builder) batch(rng *rand.Rand, n, classes int) ([]float32, []int) {
	in := b.net.Input.Size()
	x := randomInputs(rng, in, n)
	if b.input != nil {
		for i := range n {
			copy(x[i*in:(i+1)*in], b.input(rng))
		}
	}
	return x, randomLabels(rng, n, classes)
}

func randParams(rng *rand.Rand, n int) []float32 {
	p := make([]float32, n)
	for i := range p {
		p[i] = float32(0.4 * rng.NormFloat64())
	}
	return p
}

// TestGradients checks each layer's per-example gradients against batch-1
// passes and float64 central finite differences, and the clipped sum
// against the sum of individually scaled gradients.
func TestGradients(t *testing.T) {
	for name, b := range testNets() {
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			classes := shapes[len(shapes)-1].C
			// Two workers, chunks of 2: 5 examples run as 2+2+1.
			p, err := NewPlan(b.net, params, Options{MaxBatch: 5, Workers: 2, Chunk: 2})
			if err != nil {
				t.Fatal(err)
			}
			const n = 5
			x, y := b.batch(rng, n, classes)
			in := b.net.Input.Size()
			grads := make([][]float32, n)
			for i := range grads {
				grads[i] = make([]float32, b.n)
			}
			if _, err := p.Gradients(x, y, grads); err != nil {
				t.Fatal(err)
			}
			one := [][]float32{make([]float32, b.n)}
			p64 := make([]float64, b.n)
			for j, v := range params {
				p64[j] = float64(v)
			}
			for i := range n {
				if _, err := p.Gradients(x[i*in:(i+1)*in], y[i:i+1], one); err != nil {
					t.Fatal(err)
				}
				if d := relDiff(grads[i], one[0]); d > 1e-5 {
					t.Errorf("example %d: batched vs batch-1 rel diff %.2g", i, d)
				}
				x64 := make([]float64, in)
				for j := range x64 {
					x64[j] = float64(x[i*in+j])
				}
				fd := make([]float32, b.n)
				for j := range p64 {
					const h = 1e-5
					old := p64[j]
					p64[j] = old + h
					lp := refLoss(b.net, p64, x64, y[i])
					p64[j] = old - h
					lm := refLoss(b.net, p64, x64, y[i])
					p64[j] = old
					fd[j] = float32((lp - lm) / (2 * h))
				}
				if d := relDiff(grads[i], fd); d > 1e-4 {
					t.Errorf("example %d: gradient vs finite differences rel diff %.2g\n got %v\nwant %v", i, d, grads[i], fd)
				}
			}
			// Clipped sum with factors depending on the example and layer.
			sum := make([]float32, b.n)
			cl := &testClipper{sq: make([][]float64, n)}
			if _, err := p.Step(x, y, sum, cl); err != nil {
				t.Fatal(err)
			}
			want := make([]float32, b.n)
			layerOf := affineOf(b.net, b.n)
			// The squared norms the clipper sees are those of each
			// example's gradient, layer by layer.
			for i := range n {
				wantSq := make([]float64, len(cl.sq[i]))
				for j, g := range grads[i] {
					wantSq[layerOf[j]] += float64(g) * float64(g)
				}
				for l, v := range wantSq {
					if math.Abs(cl.sq[i][l]-v) > 1e-5*v {
						t.Errorf("example %d layer %d: squared norm %v, gradient's %v", i, l, cl.sq[i][l], v)
					}
				}
			}
			for i := range n {
				for j, g := range grads[i] {
					want[j] += float32(cl.factor(i, layerOf[j])) * g
				}
			}
			if d := relDiff(sum, want); d > 1e-5 {
				t.Errorf("clipped sum rel diff %.2g", d)
			}
			// Non-private: the plain sum.
			for j := range want {
				want[j] = 0
				for i := range n {
					want[j] += grads[i][j]
				}
			}
			if _, err := p.Step(x, y, sum, nil); err != nil {
				t.Fatal(err)
			}
			if d := relDiff(sum, want); d > 1e-5 {
				t.Errorf("sum rel diff %.2g", d)
			}
		})
	}
}

// testClipper scales example i's layer l by factor(i, l) and, with sq
// set, records each example's per-layer squared norms (workers write
// distinct entries).
type testClipper struct{ sq [][]float64 }

func (testClipper) factor(i, l int) float64 { return 0.25 + 0.5*float64((i+2*l)%3) }

func (c *testClipper) Scale(i int, sq []float64, _ float64, f []float64) {
	if c.sq != nil {
		c.sq[i] = append([]float64(nil), sq...)
	}
	for l := range f {
		f[l] = c.factor(i, l)
	}
}

// affineOf maps each parameter index to its layer with parameters, in
// the plan's order (a residual block's body, then its shortcut).
func affineOf(net Network, n int) []int {
	out := make([]int, n)
	a := 0
	var walk func([]Layer)
	walk = func(ls []Layer) {
		for _, l := range ls {
			var w, b Param
			switch l := l.(type) {
			case Residual:
				walk(l.Body)
				walk(l.Shortcut)
				continue
			case Embedding:
				for _, t := range l.Tables {
					for j := range t.Weight.Len {
						out[t.Weight.Offset+j] = a
					}
				}
				a++
				continue
			case Conv2D:
				w, b = l.Weight, l.Bias
			case Dense:
				w, b = l.Weight, l.Bias
			case GroupNorm:
				w, b = l.Weight, l.Bias
			case LayerNorm:
				w, b = l.Weight, l.Bias
			default:
				continue
			}
			for j := range w.Len {
				out[w.Offset+j] = a
			}
			for j := range b.Len {
				out[b.Offset+j] = a
			}
			a++
		}
	}
	walk(net.Layers)
	return out
}

func relDiff(a, b []float32) float64 {
	d, nb := 0.0, 0.0
	for i := range a {
		t := float64(a[i]) - float64(b[i])
		d += t * t
		nb += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(d) / max(math.Sqrt(nb), 1e-30)
}

// flatClipper clips to zeta as package clip does and records the norms.
type flatClipper struct {
	zeta float64
	sq   [][]float64
}

func (c *flatClipper) Scale(i int, sq []float64, _ float64, f []float64) {
	c.sq[i] = append(c.sq[i][:0], sq...)
	t := 0.0
	for _, v := range sq {
		t += v
	}
	s := min(1, c.zeta/math.Sqrt(t)*(1-1.0/(1<<20)))
	for l := range f {
		f[l] = s
	}
}

// TestNormsUnderCancellation builds a convolution whose per-example
// gradient U^T G is a sum of two huge, nearly opposite terms (two pixels
// with nearly equal inputs, gradients of opposite sign): a ghost norm from
// float32 Gram matrices (the old engine's method) is wrong there by far
// more than any safety factor, while the executor's norm must be the
// float64 norm of exactly the float32 values it adds, so the clipped
// contribution stays <= zeta.
func TestNormsUnderCancellation(t *testing.T) {
	b := &builder{net: Network{Input: Shape{4, 1, 2}}}
	b.conv(4, 4, 1, 1, 0, Identity)
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(8, 2, Identity)
	rng := rand.New(rand.NewPCG(7, 8))
	params := randParams(rng, b.n)
	dw := b.net.Layers[2].(Dense).Weight
	for c := range 4 {
		for o := range 2 {
			// Flattened index c*2 + pixel: pixel 1's weights are minus
			// pixel 0's, so G_1 = -G_0 (up to 1e-3).
			params[dw.Offset+(c*2+1)*2+o] = -params[dw.Offset+(c*2)*2+o] * (1 + 1e-3)
		}
	}
	p, err := NewPlan(b.net, params, Options{MaxBatch: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	worstGhost := 0.0
	for trial := range 20 {
		x := make([]float32, 8)
		for c := range 4 {
			v := float32(1e4 * rng.NormFloat64())
			x[c*2], x[c*2+1] = v, v+float32(rng.NormFloat64())
		}
		y := []int{trial % 2}
		g := [][]float32{make([]float32, b.n)}
		if _, err := p.Gradients(x, y, g); err != nil {
			t.Fatal(err)
		}
		cl := &flatClipper{zeta: 1e-3, sq: make([][]float64, 1)}
		out := make([]float32, b.n)
		if _, err := p.Step(x, y, out, cl); err != nil {
			t.Fatal(err)
		}
		cw := b.net.Layers[0].(Conv2D)
		conv := append(append([]float32(nil), g[0][cw.Weight.Offset:cw.Weight.Offset+cw.Weight.Len]...), g[0][cw.Bias.Offset:cw.Bias.Offset+cw.Bias.Len]...)
		want := sumsq64(conv)
		if got := cl.sq[0][0]; math.Abs(got-want) > 1e-12*want {
			t.Errorf("trial %d: conv squared norm %v, float64 norm of the added gradient %v", trial, got, want)
		}
		if n := math.Sqrt(sumsq64(out)); n > 1e-3 {
			t.Errorf("trial %d: clipped norm %.10g > zeta 1e-3", trial, n)
		}
		// The float32 ghost identity <U U^T, G G^T> on the same example
		// (weight part), against the float64 norm of U^T G.
		var U, G [2][4]float32
		z := [2]float64{}
		for o := range 2 {
			z[o] = float64(params[b.net.Layers[2].(Dense).Bias.Offset+o])
		}
		for pix := range 2 {
			for c := range 4 {
				U[pix][c] = x[c*2+pix]
				a := float64(params[cw.Bias.Offset+c])
				for k := range 4 {
					a += float64(x[k*2+pix]) * float64(params[cw.Weight.Offset+k*4+c])
				}
				for o := range 2 {
					z[o] += a * float64(params[dw.Offset+(c*2+pix)*2+o])
				}
			}
		}
		mx := max(z[0], z[1])
		e0, e1 := math.Exp(z[0]-mx), math.Exp(z[1]-mx)
		dl := [2]float64{e0 / (e0 + e1), e1 / (e0 + e1)}
		dl[y[0]]--
		for pix := range 2 {
			for c := range 4 {
				G[pix][c] = float32(float64(params[dw.Offset+(c*2+pix)*2])*dl[0] + float64(params[dw.Offset+(c*2+pix)*2+1])*dl[1])
			}
		}
		ghost := 0.0
		for p1 := range 2 {
			for p2 := range 2 {
				var a, g float32
				for c := range 4 {
					a += U[p1][c] * U[p2][c]
					g += G[p1][c] * G[p2][c]
				}
				ghost += float64(a) * float64(g)
			}
		}
		exact := 0.0
		for k := range 4 {
			for c := range 4 {
				v := float64(U[0][k])*float64(G[0][c]) + float64(U[1][k])*float64(G[1][c])
				exact += v * v
			}
		}
		worstGhost = max(worstGhost, math.Abs(ghost-exact)/exact)
	}
	// The case is adversarial: the old method's error dwarfs its 1e-6
	// safety factor.
	if worstGhost < 1e-3 {
		t.Errorf("float32 ghost norms within %.2g of the truth: the test is not adversarial", worstGhost)
	}
	t.Logf("float32 ghost squared norm: worst relative error %.3g", worstGhost)
}

// TestDropout checks dropout's per-example gradients against finite
// differences of a reference using the same masks, the identity at
// evaluation, and that masks follow the step counter.
func TestDropout(t *testing.T) {
	b := &builder{net: Network{Input: Shape{2, 4, 4}}}
	b.conv(2, 3, 3, 1, 1, Tanh)
	b.net.Layers = append(b.net.Layers, Flatten{}, Dropout{Rate: 0.3, Seed: 11})
	b.dense(48, 6, Tanh)
	b.net.Layers = append(b.net.Layers, Dropout{Rate: 0.5, Seed: 12})
	b.dense(6, 3, Identity)
	rng := rand.New(rand.NewPCG(3, 3))
	params := randParams(rng, b.n)
	p, err := NewPlan(b.net, params, Options{MaxBatch: 4, Workers: 2, Chunk: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	x := make([]float32, n*32)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := []int{0, 2, 1, 2}
	p.SetStepCount(5)
	grads := make([][]float32, n)
	for i := range grads {
		grads[i] = make([]float32, b.n)
	}
	if _, err := p.Gradients(x, y, grads); err != nil {
		t.Fatal(err)
	}
	p64 := make([]float64, b.n)
	for j, v := range params {
		p64[j] = float64(v)
	}
	kept, total := 0, 0
	for i := range n {
		drop := func(l, k int) float64 {
			d := b.net.Layers[l].(Dropout)
			if dropKeep(d.Seed, 5, i, l, k, uint64(d.Rate*(1<<64))) {
				return 1 / (1 - d.Rate)
			}
			return 0
		}
		for k := range 48 {
			total++
			if drop(2, k) > 0 {
				kept++
			}
		}
		x64 := make([]float64, 32)
		for j := range x64 {
			x64[j] = float64(x[i*32+j])
		}
		fd := make([]float32, b.n)
		for j := range p64 {
			const h = 1e-5
			old := p64[j]
			p64[j] = old + h
			lp := refLossDrop(b.net, p64, x64, y[i], drop)
			p64[j] = old - h
			lm := refLossDrop(b.net, p64, x64, y[i], drop)
			p64[j] = old
			fd[j] = float32((lp - lm) / (2 * h))
		}
		if d := relDiff(grads[i], fd); d > 1e-4 {
			t.Errorf("example %d: gradient vs finite differences rel diff %.2g", i, d)
		}
	}
	if f := float64(kept) / float64(total); math.Abs(f-0.7) > 0.1 {
		t.Errorf("kept fraction %v, want about 0.7", f)
	}
	// Step uses the same masks as Gradients at the same count, then
	// advances it: the next step's masks differ.
	sum1 := make([]float32, b.n)
	if _, err := p.Step(x, y, sum1, nil); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, b.n)
	for i := range n {
		for j, g := range grads[i] {
			want[j] += g
		}
	}
	if d := relDiff(sum1, want); d > 1e-5 {
		t.Errorf("step at count 5 vs gradients at count 5: rel diff %.2g", d)
	}
	sum2 := make([]float32, b.n)
	if _, err := p.Step(x, y, sum2, nil); err != nil {
		t.Fatal(err)
	}
	if relDiff(sum2, sum1) < 1e-3 || p.StepCount() != 7 {
		t.Errorf("masks did not change with the step (count %d)", p.StepCount())
	}
	p.SetStepCount(5)
	if _, err := p.Step(x, y, sum2, nil); err != nil {
		t.Fatal(err)
	}
	if relDiff(sum2, sum1) != 0 {
		t.Error("SetStepCount(5) did not reproduce step 5")
	}
	// Evaluation passes activations through: same logits as without
	// the dropout layers.
	plain := Network{Input: b.net.Input, Layers: []Layer{b.net.Layers[0], b.net.Layers[1], b.net.Layers[3], b.net.Layers[5]}}
	q, err := NewPlan(plain, params, Options{MaxBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	l1, l2 := make([]float32, n*3), make([]float32, n*3)
	if err := p.Forward(x, l1); err != nil {
		t.Fatal(err)
	}
	if err := q.Forward(x, l2); err != nil {
		t.Fatal(err)
	}
	if relDiff(l1, l2) > 1e-6 { // chunks of 1 and of 4: other GEMM paths
		t.Errorf("dropout changed evaluation logits: %v vs %v", l1, l2)
	}
	if _, err := NewPlan(Network{Input: Shape{1, 1, 2}, Layers: []Layer{Dropout{Rate: 1}, Flatten{}}}, nil, Options{MaxBatch: 1}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("rate 1: error %v", err)
	}
}

func TestEmbeddingIDErrors(t *testing.T) {
	b := &builder{net: Network{Input: Shape{3, 1, 1}}}
	tab := EmbeddingTable{Vocab: 4, Dim: 2, Weight: b.param(8)}
	b.net.Layers = append(b.net.Layers, Embedding{Numeric: 1, Tables: []EmbeddingTable{tab}})
	b.dense(5, 2, Identity)
	p, err := NewPlan(b.net, make([]float32, b.n), Options{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	g := make([]float32, b.n)
	for _, x := range [][]float32{{0.5, 1, 4}, {0, 1.5, 0}, {0, -2, 0}} {
		_, err := p.Step(x, []int{0}, g, nil)
		if !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "is not an integer in [0, 4)") {
			t.Errorf("ids %v: error %v", x, err)
		}
	}
	// Not first: refused.
	bad := Network{Input: Shape{3, 1, 1}, Layers: []Layer{Dense{Out: 3, Weight: Param{0, 9}, Bias: Param{9, 3}}, Embedding{Tables: []EmbeddingTable{{Vocab: 2, Dim: 1, Weight: Param{12, 2}}}}}}
	if _, err := NewPlan(bad, make([]float32, 20), Options{MaxBatch: 1}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("embedding after a dense layer: error %v", err)
	}
}

// TestStepAllocs checks that a step of the networks with norms, average
// pooling and residual joins allocates nothing on one worker, private and
// not.
func TestStepAllocs(t *testing.T) {
	nets := testNets()
	for _, name := range []string{"norms-avgpool-gelu", "norms-relu-first-map", "residual"} {
		b := nets[name]
		rng := rand.New(rand.NewPCG(5, 6))
		params := randParams(rng, b.n)
		p, err := NewPlan(b.net, params, Options{MaxBatch: 4, Workers: 1, Chunk: 2})
		if err != nil {
			t.Fatal(err)
		}
		x := make([]float32, 4*b.net.Input.Size())
		for k := range x {
			x[k] = float32(rng.NormFloat64())
		}
		y := []int{0, 1, 2, 0}
		dst := make([]float32, b.n)
		for _, cl := range []Clipper{nil, &testClipper{}} {
			step := func() {
				if _, err := p.Step(x, y, dst, cl); err != nil {
					t.Fatal(err)
				}
			}
			step()
			if a := testing.AllocsPerRun(5, step); a != 0 {
				t.Errorf("%s, clipper %T: %.1f allocations per step", name, cl, a)
			}
		}
	}
}

// TestLeakyReLUSlope checks that a LeakyReLU layer needs a slope in
// (0, 1), that only LeakyReLU takes one, and that the new activations'
// names round-trip.
func TestLeakyReLUSlope(t *testing.T) {
	for _, l := range []Dense{
		{Out: 2, Act: LeakyReLU, Weight: Param{0, 6}, Bias: Param{6, 2}},
		{Out: 2, Act: LeakyReLU, Slope: 1, Weight: Param{0, 6}, Bias: Param{6, 2}},
		{Out: 2, Act: Sigmoid, Slope: 0.1, Weight: Param{0, 6}, Bias: Param{6, 2}},
	} {
		if _, err := (Network{Input: Shape{3, 1, 1}, Layers: []Layer{l}}).Shapes(); err == nil {
			t.Errorf("%v slope %v accepted", l.Act, l.Slope)
		}
	}
	for _, a := range []Activation{Sigmoid, LeakyReLU} {
		b, err := a.MarshalText()
		var back Activation
		if err != nil || back.UnmarshalText(b) != nil || back != a {
			t.Errorf("%v: %q, %v, back %v", a, b, err, back)
		}
	}
}
