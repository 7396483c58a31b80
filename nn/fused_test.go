package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// specials are float32 values at the edges of the roundings the fused
// kernels must reproduce: zeros, the smallest and largest normals,
// subnormals, infinities and NaN.
var specials = []float32{0, float32(math.Copysign(0, -1)), 0x1p-126, -0x1p-126, 0x1p-149, -0x1p-140, 0x1.fffffep127, -0x1.fffffep127,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1, -1, 0x1p-100, 0x1.000002p-126}

// randSpecial fills v with normal values of many magnitudes and a sprinkle
// of specials.
func randSpecial(rng *rand.Rand, v []float32) {
	for k := range v {
		if rng.IntN(8) == 0 {
			v[k] = specials[rng.IntN(len(specials))]
			continue
		}
		v[k] = float32(rng.NormFloat64() * math.Exp2(float64(rng.IntN(200)-100)))
	}
}

// TestAddScaledDown: the fused scale-and-add gives, bit for bit, what
// scaleDown followed by add gave (the AVX2 kernel and the loop), for
// factors that make products subnormal and every length's tail.
func TestAddScaledDown(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, c := range []float64{1, 0.5, 0x1p-30, 0x1p-100, 0.999999, 1e-38, 0.3} {
		for n := range 70 {
			v := make([]float32, n)
			acc := make([]float32, n)
			randSpecial(rng, v)
			randSpecial(rng, acc)
			want := append([]float32(nil), acc...)
			sv := append([]float32(nil), v...)
			scaleDown(c, sv)
			add(want, sv)
			got := append([]float32(nil), acc...)
			addScaledDown(got, v, c)
			loop := append([]float32(nil), acc...)
			addScaledDownGo(loop, v, c)
			sameBits(t, "fused kernel", got, want)
			sameBits(t, "fused loop", loop, want)
		}
	}
}

// TestClippedSumBitExact: on one worker, each convolution and norm
// parameter of the clipped sum is, bit for bit, the float32 sum over the
// examples in order of MulDown(Factor32(c_i), g_i) with g_i the example's
// gradient entry (Gradients): the sum adds exactly the scaled vectors
// whose norms the clipper saw, however the passes around the products
// are fused. (Dense layers and ghost-norm convolution weights sum by one
// book-keeping product instead.)
func TestClippedSumBitExact(t *testing.T) {
	for name, b := range testNets() {
		if strings.HasPrefix(name, "embedding") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, uint64(len(name))))
			params := randParams(rng, b.n)
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			classes := shapes[len(shapes)-1].C
			const n = 7
			p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 1, Chunk: 3})
			if err != nil {
				t.Fatal(err)
			}
			x, y := b.batch(rng, n, classes)
			grads := make([][]float32, n)
			for i := range grads {
				grads[i] = make([]float32, b.n)
			}
			if _, err := p.Gradients(x, y, grads); err != nil {
				t.Fatal(err)
			}
			sum := make([]float32, b.n)
			cl := &testClipper{}
			if _, err := p.Step(x, y, sum, cl); err != nil {
				t.Fatal(err)
			}
			layerOf, dense := affineOf(b.net, b.n), denseParams(b.net, b.n)
			for _, s := range p.stages {
				if s.ghost { // summed by one product too (recompute.go)
					for k := range s.w.Len {
						dense[s.w.Offset+k] = true
					}
				}
			}
			checked := 0
			for k := range sum {
				if dense[k] {
					continue
				}
				want := float32(0)
				for i := range n {
					want += MulDown(Factor32(cl.factor(i, layerOf[k])), grads[i][k])
				}
				if math.Float32bits(sum[k]) != math.Float32bits(want) {
					t.Fatalf("parameter %d: clipped sum %v, want %v bit for bit", k, sum[k], want)
				}
				checked++
			}
			if checked == 0 {
				t.Skip("this test network has no convolution or norm parameter: the property is about their fused passes")
			}
		})
	}
}

// denseParams marks the parameters of dense layers.
func denseParams(net Network, n int) []bool {
	out := make([]bool, n)
	var walk func([]Layer)
	walk = func(ls []Layer) {
		for _, l := range ls {
			switch l := l.(type) {
			case Residual:
				walk(l.Body)
				walk(l.Shortcut)
			case Dense:
				for _, q := range []Param{l.Weight, l.Bias} {
					for j := range q.Len {
						out[q.Offset+j] = true
					}
				}
			}
		}
	}
	walk(net.Layers)
	return out
}

// TestImplicitConvolution: convolutions run as implicit products
// (implicit.go) give the per-example gradients, losses and clipped sums
// of the same network run through im2col, up to float32 summation order,
// for every test network with a stride-1 'same' convolution (3x3 and 1x1,
// first layer and inner, in residual blocks, with norms after them).
func TestImplicitConvolution(t *testing.T) {
	for name, b := range testNets() {
		t.Run(name, func(t *testing.T) {
			const n = 5
			imp, ref, rng, classes := planPair(t, b, 11, len(name), n, func(o *Options) { o.noImplicit = true })
			some := false
			for _, s := range imp.stages {
				some = some || s.implicit
			}
			if !some {
				t.Skip("this test network has no stride-1 'same' convolution, the only kind run as an implicit product")
			}
			x, y := b.batch(rng, n, classes)
			grads := func(p *Plan) ([][]float32, []float64) { return gradientsOf(t, p, x, y, b.n) }
			gi, li := grads(imp)
			gr, lr := grads(ref)
			for i := range n {
				if d := relDiff(gi[i], gr[i]); d > 1e-5 {
					t.Errorf("example %d: implicit vs im2col gradient rel diff %.2g", i, d)
				}
				if math.Abs(li[i]-lr[i]) > 1e-5*(1+math.Abs(lr[i])) {
					t.Errorf("example %d: loss %v, im2col %v", i, li[i], lr[i])
				}
			}
			si, sr := stepSums(t, imp, ref, x, y, b.n)
			for c := range si {
				if d := relDiff(si[c], sr[c]); d > 1e-5 {
					t.Errorf("clipper %v: implicit vs im2col sum rel diff %.2g", c == 1, d)
				}
			}
		})
	}
}

// TestActGradTo: the fused derivative (written into an implicit
// convolution's bordered map) gives actGrad's bits.
func TestActGradTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, act := range []Activation{Identity, Tanh, ReLU} {
		if !fusesActGrad(act) {
			t.Fatalf("%v not fused", act)
		}
		for n := range 40 {
			g, a := make([]float32, n), make([]float32, n)
			randSpecial(rng, g)
			randSpecial(rng, a)
			if act == Tanh {
				for k := range a {
					a[k] = tanh32(a[k])
				}
			}
			want := append([]float32(nil), g...)
			actGrad(want, a, act)
			got := make([]float32, n)
			actGradTo(got, g, a, act)
			sameBits(t, act.String(), got, want)
		}
	}
	for _, act := range []Activation{GELU, Sigmoid, LeakyReLU} {
		if fusesActGrad(act) {
			t.Errorf("%v claims the fused derivative", act)
		}
	}
}

// TestRecomputedGradients: per-example weight gradients recomputed in
// panels (recompute.go) give the stored path's norms, L-inf norms, losses
// and clipped sums bit for bit, with panels of every size (ragged
// included), non-finite examples among the others.
func TestRecomputedGradients(t *testing.T) {
	b := testNets()["recomputed"]
	shapes, err := b.net.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	classes := shapes[len(shapes)-1].C
	const n = 7
	rng := rand.New(rand.NewPCG(21, 22))
	params := randParams(rng, b.n)
	x, y := b.batch(rng, n, classes)
	x[2*b.net.Input.Size()+5] = float32(math.Inf(1))
	ref, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 2, LInf: true, noRecompute: true})
	if err != nil {
		t.Fatal(err)
	}
	step := func(p *Plan) ([]float32, []float64, [][]float64) {
		sum := make([]float32, b.n)
		cl := &linfClipper{testClipper: testClipper{sq: make([][]float64, n)}, linf: make([]float64, n)}
		loss, err := p.Step(x, y, sum, cl)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range cl.linf {
			cl.sq[i] = append(cl.sq[i], v)
		}
		return sum, append([]float64(nil), loss...), cl.sq
	}
	sr, lr, qr := step(ref)
	for _, rows := range []int{0, 1, 5, 16, 27} {
		p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 2, LInf: true, panelRows: rows})
		if err != nil {
			t.Fatal(err)
		}
		some := 0
		for _, s := range p.stages {
			if s.recompute {
				some++
			}
		}
		if some != 3 {
			t.Fatalf("%d convolutions recomputed, want 3", some)
		}
		s, l, q := step(p)
		for k := range s {
			if math.Float32bits(s[k]) != math.Float32bits(sr[k]) {
				t.Fatalf("rows %d: sum[%d] = %v, stored path %v", rows, k, s[k], sr[k])
			}
		}
		for i := range n {
			if !sameFloat(l[i], lr[i]) {
				t.Errorf("rows %d: loss %d = %v, stored path %v", rows, i, l[i], lr[i])
			}
			for a := range q[i] { // the squared norms, then the L-inf norm
				if !sameFloat(q[i][a], qr[i][a]) {
					t.Errorf("rows %d: example %d norm %d: %v, stored path %v", rows, i, a, q[i][a], qr[i][a])
				}
			}
		}
	}
}

// linfClipper is testClipper also keeping each example's L-inf norm.
type linfClipper struct {
	testClipper
	linf []float64
}

func (c *linfClipper) Scale(i int, sq []float64, linf float64, f []float64) {
	c.linf[i] = linf
	c.testClipper.Scale(i, sq, linf, f)
}

// sameFloat is bit equality, NaN equal to NaN.
func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b))
}

// TestStreamChunk: a weight larger than the caches (a 3x3 convolution of
// 256 channels at 8x8, 64 output pixels) asks for chunks of 2 examples
// (128 rows), small weights for none, and the automatic chunk is at least
// that (up to the batch).
func TestStreamChunk(t *testing.T) {
	big := &builder{net: Network{Input: Shape{256, 8, 8}}}
	big.conv(256, 256, 3, 1, 1, ReLU)
	big.net.Layers = append(big.net.Layers, AvgPool{Size: 8}, Flatten{})
	big.dense(256, 10, Identity)
	small := testNets()["recomputed"]
	for _, c := range []struct {
		b           *builder
		batch, want int
	}{{big, 64, 2}, {big, 1, 2}, {small, 64, 1}} {
		p, err := NewPlan(c.b.net, make([]float32, c.b.n), Options{MaxBatch: c.batch, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := p.streamChunk(); got != c.want {
			t.Errorf("%+v: streamChunk %d, want %d", c.b.net.Input, got, c.want)
		}
		if p.opt.Chunk < min(c.want, c.batch) {
			t.Errorf("%+v, batch %d: chunk %d < %d", c.b.net.Input, c.batch, p.opt.Chunk, min(c.want, c.batch))
		}
	}
}

// TestBiasActTo: bias and activation written from an implicit
// convolution's wide rows into the output give biasAct's bits in place,
// and leave the source as it was.
func TestBiasActTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for _, act := range []Activation{Identity, Tanh, ReLU} {
		for _, fo := range []int{1, 3, 8, 13, 32, 40} {
			for _, rows := range []int{1, 2, 5} {
				z, bias := make([]float32, rows*fo), make([]float32, fo)
				randSpecial(rng, z)
				for k := range bias {
					bias[k] = float32(rng.NormFloat64())
				}
				src := append([]float32(nil), z...)
				want := append([]float32(nil), z...)
				biasAct(want, bias, act)
				got := make([]float32, len(z))
				biasActTo(got, z, bias, act)
				sameBits(t, act.String(), got, want)
				sameBits(t, act.String()+" source", z, src)
				if act == Tanh && fo%8 == 0 || act == Identity {
					// implicitForward's whole rows, the bias repeated.
					row := make([]float32, len(z))
					for k := 0; k < len(row); k += fo {
						copy(row[k:k+fo], bias)
					}
					clear(got)
					if act == Identity {
						addTo(got, z, row)
					} else {
						biasTanhTo(got, z, row)
					}
					sameBits(t, act.String()+" over whole rows", got, want)
				}
			}
		}
	}
}

// TestFusedGrads: input gradients written straight into the producing
// implicit convolution's bordered map, derivative applied (fuseGrads:
// convolution after convolution, max pool after convolution), give the
// per-example gradients, losses and sums of the unfused passes bit for
// bit, on every test network and on examples with non-finite values.
func TestFusedGrads(t *testing.T) {
	samePlansOnNets(t, 17, func(o *Options) { o.noFuseGrads = true }, func(s *stage) bool { return s.gradToGp },
		"writes an input gradient into its producer's bordered map")
}

// TestSkipGarbage: implicit convolutions' per-example weight gradients
// summed without the garbage columns give the per-example gradients,
// losses and sums of the sums over them bit for bit, on every test
// network and on examples with non-finite values.
func TestSkipGarbage(t *testing.T) {
	samePlansOnNets(t, 29, func(o *Options) { o.noSkipGarbage = true }, func(s *stage) bool { return s.implicit },
		"is an implicit convolution")
}

// TestRowRuns: implicit convolutions' forward and input-gradient
// products computing only the real pixels' rows (no garbage rows) give
// the per-example gradients, losses and sums of the products over all
// the wide rows bit for bit, on every test network and on examples with
// non-finite values.
func TestRowRuns(t *testing.T) {
	samePlansOnNets(t, 31, func(o *Options) { o.noRowRuns = true }, func(s *stage) bool { return s.implicit },
		"is an implicit convolution")
}

// samePlansOnNets runs samePlans on every test network with a stage for
// which uses holds, between plans with the default options and with alt
// (planPair, seeded by seed), and fails if no network has such a stage
// (what describes it).
func samePlansOnNets(t *testing.T, seed uint64, alt func(*Options), uses func(*stage) bool, what string) {
	some := 0
	for name, b := range testNets() {
		t.Run(name, func(t *testing.T) {
			const n = 5
			fp, ref, rng, classes := planPair(t, b, seed, len(name), n, alt)
			found := false
			for i := range fp.stages {
				found = found || uses(&fp.stages[i])
			}
			if !found {
				t.Skip("no stage of this test network " + what)
			}
			some++
			samePlans(t, fp, ref, b, rng, n, classes)
		})
	}
	if some == 0 {
		t.Error("no stage of any test network " + what)
	}
}

// samePlans checks that plans fp and ref of test network b give the same
// per-example gradients, losses and sums (with and without a clipper)
// bit for bit on n examples drawn from rng, example 3 with an infinite
// input and example 4 with inputs large enough to saturate every tanh,
// and returns that batch.
func samePlans(t *testing.T, fp, ref *Plan, b *builder, rng *rand.Rand, n, classes int) ([]float32, []int) {
	t.Helper()
	x, y := b.batch(rng, n, classes)
	sz := len(x) / n
	x[3*sz+1] = float32(math.Inf(1))
	for k := 4 * sz; k < 5*sz; k++ {
		x[k] *= 1e4
	}
	grads := func(p *Plan) ([][]float32, []float64) { return gradientsOf(t, p, x, y, b.n) }
	gf, lf := grads(fp)
	gr, lr := grads(ref)
	for i := range n {
		sameBits(t, fmt.Sprintf("example %d gradient", i), gf[i], gr[i])
		if math.Float64bits(lf[i]) != math.Float64bits(lr[i]) {
			t.Errorf("example %d: loss %v, reference %v", i, lf[i], lr[i])
		}
	}
	sf, sr := stepSums(t, fp, ref, x, y, b.n)
	for c := range sf {
		sameBits(t, fmt.Sprintf("clipper %v: sum", c == 1), sf[c], sr[c])
	}
	return x, y
}

// stepSums runs one step of plans a and b on x, y, without a clipper
// (index 0) and with testClipper (index 1), and returns each plan's sums
// (np parameters).
func stepSums(t *testing.T, a, b *Plan, x []float32, y []int, np int) (sa, sb [2][]float32) {
	t.Helper()
	for c, cl := range []Clipper{nil, &testClipper{}} {
		sa[c], sb[c] = make([]float32, np), make([]float32, np)
		if _, err := a.Step(x, y, sa[c], cl); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Step(x, y, sb[c], cl); err != nil {
			t.Fatal(err)
		}
	}
	return sa, sb
}

// TestBiasTanhWidths: the split of a row between the AVX-512 kernel
// (16 at a time), the AVX2 kernel (8) and tanh32 (the rest) gives the
// bits the AVX2 kernel and tanh32 gave before the AVX-512 kernel was
// added (the first len &^ 7 entries by the AVX2 kernel, where the CPU
// has AVX2), for every row length's tail.
func TestBiasTanhWidths(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	for n := range 70 {
		z, bias := make([]float32, n), make([]float32, n)
		randSpecial(rng, z)
		for k := range z {
			if rng.IntN(2) == 0 {
				z[k] = float32(rng.NormFloat64() * 3)
			}
			bias[k] = float32(rng.NormFloat64())
		}
		got := make([]float32, n)
		biasTanhTo(got, z, bias)
		want := make([]float32, n)
		for k := range want {
			if k < n&^7 {
				want[k] = biasTanhOne(z[k], bias[k])
			} else {
				want[k] = tanh32(z[k] + bias[k])
			}
		}
		sameBits(t, fmt.Sprintf("length %d", n), got, want)
	}
}

// planPair builds test network b twice over the same random parameters
// (seeded by seed and key), for n examples on 2 workers in chunks of 2:
// with the default options and with those alt sets; it returns the
// generator, to draw the batch from next, and the number of classes.
func planPair(t *testing.T, b *builder, seed uint64, key, n int, alt func(*Options)) (p, ref *Plan, rng *rand.Rand, classes int) {
	t.Helper()
	rng = rand.New(rand.NewPCG(seed, uint64(key)))
	params := randParams(rng, b.n)
	shapes, err := b.net.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{MaxBatch: n, Workers: 2, Chunk: 2}
	if p, err = NewPlan(b.net, params, opt); err != nil {
		t.Fatal(err)
	}
	alt(&opt)
	if ref, err = NewPlan(b.net, params, opt); err != nil {
		t.Fatal(err)
	}
	return p, ref, rng, shapes[len(shapes)-1].C
}

// gradientsOf is p.Gradients' per-example gradients (size floats each)
// and losses, copied.
func gradientsOf(t *testing.T, p *Plan, x []float32, y []int, size int) ([][]float32, []float64) {
	t.Helper()
	g := make([][]float32, len(y))
	for i := range g {
		g[i] = make([]float32, size)
	}
	loss, err := p.Gradients(x, y, g)
	if err != nil {
		t.Fatal(err)
	}
	return g, append([]float64(nil), loss...)
}

// TestStride2Implicit: the stride-2 3x3 convolutions of the test networks
// run as implicit products (stride2.go) where their maps are even, and
// give the per-example gradients, losses and clipped sums of the im2col
// path up to float32 summation order (the dense-reference tolerance),
// with an example holding an infinite input and one saturating the tanh
// among them; the example with the infinite input is dropped by both.
func TestStride2Implicit(t *testing.T) {
	some := 0
	for name, b := range testNets() {
		t.Run(name, func(t *testing.T) {
			const n = 5
			imp, ref, rng, classes := planPair(t, b, 23, len(name), n, func(o *Options) { o.noImplicit = true })
			s2 := 0
			for _, s := range imp.stages {
				if s.stride2() && !s.recompute {
					if !s.implicit {
						t.Fatalf("stage %d: a stride-2 3x3 convolution on an even map does not run implicitly", s.index)
					}
					s2++
				}
			}
			if s2 == 0 {
				t.Skip("no stride-2 implicit convolution in this test network")
			}
			some++
			x, y := b.batch(rng, n, classes)
			sz := len(x) / n
			x[1*sz+3] = float32(math.Inf(-1))
			for k := 4 * sz; k < 5*sz; k++ {
				x[k] *= 1e3
			}
			gi, li := gradientsOf(t, imp, x, y, b.n)
			gr, lr := gradientsOf(t, ref, x, y, b.n)
			for i := range n {
				// Example 4's raw inputs, 1000 times larger than the
				// normalized body's, meet it at the join: the
				// float32 summation order's differences come back
				// amplified by the cancellation (1e-4 relative; 1e-6 at
				// ordinary scale).
				tol := 1e-5
				if i == 4 {
					tol = 1e-3
				}
				if d := relDiff(gi[i], gr[i]); d > tol {
					t.Errorf("example %d: implicit vs im2col gradient rel diff %.2g", i, d)
				}
				if math.IsNaN(li[i]) != math.IsNaN(lr[i]) || math.Abs(li[i]-lr[i]) > 1e-5*(1+math.Abs(lr[i])) {
					t.Errorf("example %d: loss %v, im2col %v", i, li[i], lr[i])
				}
			}
			if !math.IsNaN(li[1]) {
				t.Errorf("the example with an infinite input has loss %v", li[1])
			}
			si, sr := stepSums(t, imp, ref, x, y, b.n)
			for c := range si {
				if !allFinite(si[c]) {
					t.Fatalf("clipper %v: the sum is not finite", c == 1)
				}
				if d := relDiff(si[c], sr[c]); d > 1e-3 {
					t.Errorf("clipper %v: implicit vs im2col sum rel diff %.2g", c == 1, d)
				}
			}
		})
	}
	if some < 2 {
		t.Errorf("%d test networks with stride-2 implicit convolutions, want at least 2", some)
	}
}

// TestFusedNormsAndJoins: norms whose output goes straight into the
// next implicit convolution's bordered map and whose input gradient goes
// straight into the producing convolution's bordered output gradient
// (fuseNorms), and residual joins that write their gradient straight
// into the bordered output gradients of the implicit convolutions that
// made their body's and shortcut's activations (fuseJoins), give the
// unfused passes' per-example gradients, losses, sums (private and not)
// and logits bit for bit, on every test network and on examples with
// non-finite values.
func TestFusedNormsAndJoins(t *testing.T) {
	for _, c := range []struct {
		name string
		alt  func(*Options)
		// ways lists what a stage may fuse; each must happen somewhere.
		ways []func(s *stage) bool
	}{
		{"norms", func(o *Options) { o.noFuseNorms = true }, []func(s *stage) bool{
			func(s *stage) bool { return s.xpFilledBy() },
			func(s *stage) bool { return s.kind == kNorm && s.gradToGp },
		}},
		{"joins", func(o *Options) { o.noFuseJoins = true }, []func(s *stage) bool{
			func(s *stage) bool { return s.kind == kJoin && s.gradToGp },
			func(s *stage) bool { return s.kind == kJoin && s.skipToGp },
		}},
	} {
		seen := make([]int, len(c.ways))
		for name, b := range testNets() {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				p, err := NewPlan(b.net, make([]float32, b.n), Options{MaxBatch: 1})
				if err != nil {
					t.Fatal(err)
				}
				some := false
				for _, s := range p.stages {
					for k, way := range c.ways {
						if way(&s) {
							seen[k]++
							some = true
						}
					}
				}
				if !some {
					t.Skip("nothing of this test network is fused")
				}
				testPlanSwitch(t, name, c.alt)
			})
		}
		for k, n := range seen {
			if n == 0 {
				t.Errorf("%s: no test network fuses the %d-th way", c.name, k)
			}
		}
	}
}

// TestPoolWindows: a fused 2x2 max pool's backward written as whole
// windows by the vector kernel gives, bit for bit, the maps the scatter
// into a cleared interior gave (every fused activation, specials among
// the gradients and activations, NaN maxima, odd heights and widths
// whose last row or column the pool drops), and leaves the borders as
// they were; so do both with the derivative taken at the pool's output
// (poolOut).
func TestPoolWindows(t *testing.T) {
	if !poolBack2Fast(8, Tanh) {
		t.Skip("no vector pool backward on this machine")
	}
	t.Run("plan", func(t *testing.T) {
		p, err := NewPlan(testNets()["conv-pairs8"].net, make([]float32, testNets()["conv-pairs8"].n), Options{MaxBatch: 1})
		if err != nil {
			t.Fatal(err)
		}
		windows := 0
		for _, s := range p.stages {
			if s.kind == kPool && s.gradToGp && s.pool == 2 && poolBack2Fast(s.in.C, p.stages[s.src-1].act) {
				windows++
			}
		}
		if windows != 2 {
			t.Fatalf("%d pools write whole windows, want 2", windows)
		}
		testPlanSwitch(t, "conv-pairs8", func(o *Options) { o.noPoolWindows = true })
	})
	rng := rand.New(rand.NewPCG(23, 24))
	for _, act := range []Activation{Identity, Tanh, ReLU} {
		for _, C := range []int{8, 16, 24} {
			for _, hw := range [][2]int{{2, 2}, {4, 6}, {5, 7}, {3, 2}, {2, 3}, {7, 4}} {
				H, W := hw[0], hw[1]
				q := &stage{pad: 1, wp2: W + 2, hp2: H + 2, wq: W + 2, gpad: 1, act: act}
				s := &stage{in: Shape{C, H, W}, out: Shape{C, H / 2, W / 2}, pool: 2}
				a := make([]float32, H*W*C)
				randSpecial(rng, a)
				out, arg := make([]float32, s.out.Size()), make([]int32, s.out.Size())
				s.maxPoolLoop(a, out, s.out.W*C, arg)
				g := make([]float32, s.out.Size())
				randSpecial(rng, g)
				want := make([]float32, (H+2)*(W+2)*C)
				randSpecial(rng, want) // the borders' and interior's old values
				got := append([]float32(nil), want...)
				fromOut := [2][]float32{append([]float32(nil), want...), append([]float32(nil), want...)}
				s.poolScatter(q, want, maxima{a: a}, arg, g)
				s.poolWindows2(q, got, maxima{a: a}, arg, g)
				sameBits(t, fmt.Sprintf("%v C=%d %dx%d", act, C, H, W), got, want)
				// The derivative at the pool's output (poolOut).
				o := maxima{o: out, ost: s.out.W * C}
				s.poolScatter(q, fromOut[0], o, arg, g)
				s.poolWindows2(q, fromOut[1], o, arg, g)
				sameBits(t, fmt.Sprintf("%v C=%d %dx%d at the output, scattered", act, C, H, W), fromOut[0], want)
				sameBits(t, fmt.Sprintf("%v C=%d %dx%d at the output, windows", act, C, H, W), fromOut[1], want)
			}
		}
	}
}

// testPlanSwitch checks that test network name gives the same per-example
// gradients, losses and sums (clipped and not), bit for bit, with the
// default options and with those alt sets, on a batch with an infinite
// input and one that saturates every tanh.
func testPlanSwitch(t *testing.T, name string, alt func(*Options)) {
	b := testNets()[name]
	const n = 5
	p, ref, rng, classes := planPair(t, b, 25, len(name), n, alt)
	x, _ := samePlans(t, p, ref, b, rng, n, classes)
	sz := len(x) / n
	x[3*sz+1] = 0 // Forward takes finite inputs only
	lgp, lgr := make([]float32, n*classes), make([]float32, n*classes)
	if err := p.Forward(x, lgp); err != nil {
		t.Fatal(err)
	}
	if err := ref.Forward(x, lgr); err != nil {
		t.Fatal(err)
	}
	sameBits(t, "logits", lgp, lgr)
}

// TestFuseOutputs: convolutions and pools writing their outputs straight
// into the next convolution's bordered map (fuseOutputs) give the
// unfused passes' gradients, losses, sums and logits bit for bit.
func TestFuseOutputs(t *testing.T) {
	for name, fused := range map[string]int{"conv-pairs": 3, "conv-pairs8": 2, "stride2": 1} {
		t.Run(name, func(t *testing.T) {
			b := testNets()[name]
			p, err := NewPlan(b.net, make([]float32, b.n), Options{MaxBatch: 1})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range p.stages {
				if s.toXp {
					n++
				}
			}
			if n != fused {
				t.Fatalf("%d stages write into the next one's map, want %d", n, fused)
			}
			testPlanSwitch(t, name, func(o *Options) { o.noFuseOutputs = true })
		})
	}
}

// TestExampleMajor: a private step and Gradients running the leading
// convolutions and pools example by example, with each example's norms,
// factors and scaled adds right after its backward pass (setMajor), give
// the layer-by-layer passes' gradients, losses and sums bit for bit, on
// the CIFAR CNN's pattern (an infinite and a saturated example among the
// others).
func TestExampleMajor(t *testing.T) {
	for name, major := range map[string]int{"conv-pairs": 6, "conv-pairs8": 5} {
		t.Run(name, func(t *testing.T) {
			b := testNets()[name]
			p, err := NewPlan(b.net, make([]float32, b.n), Options{MaxBatch: 4, Chunk: 2})
			if err != nil {
				t.Fatal(err)
			}
			if p.major != major || len(p.workers[0].ex) != p.exLen {
				t.Fatalf("example-major section of %d stages, %d floats of per-example gradients for %d", p.major, len(p.workers[0].ex), p.exLen)
			}
			testPlanSwitch(t, name, func(o *Options) { o.noExampleMajor = true })
			// The norms and L-inf norms the clipper sees, bit for bit.
			const n = 5
			shapes, err := b.net.Shapes()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(29, uint64(major)))
			params := randParams(rng, b.n)
			x, y := b.batch(rng, n, shapes[len(shapes)-1].C)
			x[2*b.net.Input.Size()+3] = float32(math.NaN())
			seen := func(noMajor bool) [][]float64 {
				p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 2, LInf: true, noExampleMajor: noMajor})
				if err != nil {
					t.Fatal(err)
				}
				cl := &linfClipper{testClipper: testClipper{sq: make([][]float64, n)}, linf: make([]float64, n)}
				if _, err := p.Step(x, y, make([]float32, b.n), cl); err != nil {
					t.Fatal(err)
				}
				for i, v := range cl.linf {
					cl.sq[i] = append(cl.sq[i], v)
				}
				return cl.sq
			}
			got, want := seen(false), seen(true)
			for i := range n {
				for a := range want[i] {
					if !sameFloat(got[i][a], want[i][a]) {
						t.Errorf("example %d norm %d: %v, layer by layer %v", i, a, got[i][a], want[i][a])
					}
				}
			}
		})
	}
}
