package nn

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestGhostBound: for a ghost convolution the clipped weight gradient
// added, Uᵀ G' with G' = ghostScale(G, f, ratio) and ghostNorm's squared
// norm sq, has exact norm (in arbitrary precision) at most
// f(1+2^-24)^2 sqrt(sq), Clipper.Scale's bound, for every input:
// ordinary values, gradients that are sums of nearly opposite terms
// (where rounding G' costs far more than 2^-24 of ‖Uᵀ G‖), and huge
// inputs times tiny gradients whose scaled values are subnormal. Without
// the 2^-23 sqrt(B) term or the factor's reduction e/Y the bound fails
// here.
func TestGhostBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	const fi, fo = 24, 16
	for trial := range 400 {
		P := 2 + trial%3*2 // 2, 4, 6
		s := &stage{P: P, fi: fi, fo: fo}
		w := &worker{gx: make([]float64, P*P), gg: make([]float64, P*P), ud: make([]float64, P*fi), gd: make([]float64, P*fo)}
		kind := trial / 3 % 4
		U, G := ghostInputs(rng, kind, P, fi, fo)
		sq, ratio := (&Plan{}).ghostNorm(w, s, nil, U, G, nil)
		if kind == 0 {
			want := exactNormSq(U, G, P, fi, fo)
			if math.Abs(sq-want) > 1e-5*want {
				t.Errorf("trial %d: ghost squared norm %v, exact %v", trial, sq, want)
			}
		}
		for _, f := range []float64{1, 0.3, 0.7071, 1e-5, 1e-30, 0x1p-120} {
			g := append([]float32(nil), G...)
			ghostScale(g, f, ratio)
			got := exactNormSq(U, g, P, fi, fo)
			bound := f * (1 + 0x1p-24) * (1 + 0x1p-24)
			bound *= bound * sq
			if got > bound {
				t.Fatalf("trial %d (kind %d, P %d, f %g): clipped norm^2 %.17g > bound %.17g (ratio %g)", trial, kind, P, f, got, bound, ratio)
			}
		}
	}
}

// ghostInputs draws U (P x fi) and G (P x fo): of kind 0 ordinary; else
// U's rows nearly equal and G's in nearly opposite pairs, so that Uᵀ G
// is a sum of nearly cancelling terms, at scale 1 (kind 1), with U huge
// and G tiny (2: the scaled G subnormal for small factors), or G
// subnormal already (3).
func ghostInputs(rng *rand.Rand, kind, P, fi, fo int) (U, G []float32) {
	U, G = make([]float32, P*fi), make([]float32, P*fo)
	su, sg := 1.0, 1.0
	switch kind {
	case 2:
		su, sg = 1e35, 1e-35
	case 3:
		su, sg = 1e30, 1e-39
	}
	delta := math.Exp2(-float64(10 + rng.IntN(14)))
	for a := range fi {
		u := rng.NormFloat64()
		for p := range P {
			v := rng.NormFloat64()
			if kind != 0 {
				v = u * (1 + 1e-7*rng.NormFloat64())
			}
			U[p*fi+a] = float32(su * v)
		}
	}
	for j := range fo {
		g := rng.NormFloat64()
		for p := range P {
			v := rng.NormFloat64()
			if kind != 0 {
				v = g // rows in opposite pairs: p odd is -(1+delta) p-1
				if p%2 == 1 {
					v = -g * (1 + delta)
				}
			}
			G[p*fo+j] = float32(sg * v)
		}
	}
	return U, G
}

// exactNormSq is ‖Uᵀ G‖² (U: P x fi, G: P x fo) computed exactly and
// rounded once to float64 (upward).
func exactNormSq(U, G []float32, P, fi, fo int) float64 {
	const prec = 2200 // float32 products and their sums, exactly
	tot := new(big.Float).SetPrec(prec)
	e := new(big.Float).SetPrec(prec)
	x := new(big.Float).SetPrec(prec)
	for a := range fi {
		for j := range fo {
			e.SetFloat64(0)
			for p := range P {
				x.SetFloat64(float64(U[p*fi+a]))
				x.Mul(x, new(big.Float).SetFloat64(float64(G[p*fo+j])))
				e.Add(e, x)
			}
			e.Mul(e, e)
			tot.Add(tot, e)
		}
	}
	tot.SetMode(big.AwayFromZero)
	v, _ := tot.Float64()
	return v
}

// ghostNet is a network whose two convolutions take ghost norms, 16 and
// 4 output pixels, im2col: a stride-1 'same' one (U Uᵀ from the input
// map's Gram matrix) and a strided one (from U's columns).
func ghostNet() *builder {
	b := &builder{net: Network{Input: Shape{16, 4, 4}}}
	b.conv(16, 96, 3, 1, 1, ReLU)
	b.conv(96, 32, 3, 2, 1, Tanh)
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(128, 3, Identity)
	return b
}

// TestMapGram: a stride-1 convolution's U Uᵀ from its input map's Gram
// matrix equals, within float64 rounding, the one of its im2col rows, for
// kernels 1 to 4, paddings 0 to 2 and maps where some offsets fall
// outside entirely.
func TestMapGram(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	for _, c := range []struct{ C, H, W, k, pad int }{
		{3, 5, 4, 3, 1}, {2, 4, 4, 1, 0}, {4, 6, 5, 2, 0}, {2, 3, 3, 3, 2}, {5, 2, 3, 4, 2}, {1, 1, 1, 3, 1},
	} {
		b := &builder{net: Network{Input: Shape{c.C, c.H, c.W}}}
		b.conv(c.C, 2, c.k, 1, c.pad, Identity)
		b.net.Layers = append(b.net.Layers, Flatten{})
		p, err := NewPlan(b.net, randParams(rng, b.n), Options{MaxBatch: 1, noImplicit: true})
		if err != nil {
			t.Fatal(err)
		}
		s := &p.stages[0]
		X := make([]float32, s.in.Size())
		for k := range X {
			X[k] = float32(rng.NormFloat64())
		}
		U := make([]float32, s.P*s.fi)
		s.im2col(X, U)
		ud, xg := s.ghostLen()
		w := &worker{ud: make([]float64, ud), xg: make([]float64, xg)}
		got := make([]float64, s.P*s.P)
		w.mapGram(s, X, got)
		for a := range s.P {
			for o := range s.P {
				want := 0.0
				for k := range s.fi {
					want += float64(U[a*s.fi+k]) * float64(U[o*s.fi+k])
				}
				if math.Abs(got[a*s.P+o]-want) > 1e-12*(1+math.Abs(want)) {
					t.Fatalf("%+v: (U Uᵀ)[%d,%d] = %v, im2col rows give %v", c, a, o, got[a*s.P+o], want)
				}
			}
		}
	}
}

// TestGhostNorms: a network of ghost-norm convolutions gives the squared
// norms, losses and clipped sums of the same plan with every norm taken
// from the stored per-example gradients (Options.noGhost), within float32
// and the bound's tolerance, with an example of infinite input (dropped,
// NaN norms and loss) and one of huge input among them; alone, the huge
// example's clipped sum has norm at most, and close to, the clip norm.
func TestGhostNorms(t *testing.T) {
	b := ghostNet()
	shapes, err := b.net.Shapes()
	if err != nil {
		t.Fatal(err)
	}
	classes := shapes[len(shapes)-1].C
	const n = 7
	rng := rand.New(rand.NewPCG(41, 42))
	params := randParams(rng, b.n)
	x, y := b.batch(rng, n, classes)
	in := b.net.Input.Size()
	x[2*in+7] = float32(math.Inf(1))
	for k := range in {
		x[4*in+k] *= 1e25
	}
	plans := map[bool]*Plan{}
	for _, ghost := range []bool{false, true} {
		p, err := NewPlan(b.net, params, Options{MaxBatch: n, Workers: 2, Chunk: 2, noGhost: !ghost})
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, s := range p.stages {
			if s.ghost {
				k++
			}
		}
		if want := map[bool]int{false: 0, true: 2}[ghost]; k != want {
			t.Fatalf("ghost %v: %d ghost convolutions, want %d", ghost, k, want)
		}
		plans[ghost] = p
	}
	type result struct {
		sum  []float32
		loss []float64
		sq   [][]float64
	}
	step := func(p *Plan) result {
		r := result{sum: make([]float32, b.n)}
		cl := &testClipper{sq: make([][]float64, n)}
		loss, err := p.Step(x, y, r.sum, cl)
		if err != nil {
			t.Fatal(err)
		}
		r.loss, r.sq = append([]float64(nil), loss...), cl.sq
		return r
	}
	ref, got := step(plans[false]), step(plans[true])
	for i := range n {
		if !sameFloat(got.loss[i], ref.loss[i]) {
			t.Errorf("example %d: loss %v, stored path %v", i, got.loss[i], ref.loss[i])
		}
		for l, v := range ref.sq[i] {
			g := got.sq[i][l]
			if (i == 2) != math.IsNaN(g) || math.Abs(g-v) > 1e-5*v {
				t.Errorf("example %d layer %d: squared norm %v, stored path %v", i, l, g, v)
			}
		}
	}
	if d := relDiff(got.sum, ref.sum); !(d <= 1e-5) {
		t.Errorf("clipped sum rel diff %.2g", d)
	}
	// The huge example alone under a flat clip norm.
	const zeta = 1e-3
	out := make([]float32, b.n)
	cl := &flatClipper{zeta: zeta, sq: make([][]float64, 1)}
	if _, err := plans[true].Step(x[4*in:5*in], y[4:5], out, cl); err != nil {
		t.Fatal(err)
	}
	if nrm := math.Sqrt(sumsq64(out)); nrm > zeta || nrm < 0.999*zeta {
		t.Errorf("huge example: clipped norm %.10g, want within (0.999, 1] x %g", nrm, zeta)
	}
}

// TestSeqGhostBound: a transformer weight with a ghost norm (SeqPlan's
// norms and accumulate) adds, for inputs X (L x in) and output gradients
// G built for cancellation and for subnormal scaled values, a gradient
// whose exact norm is at most f(1+2^-24)^2 times the norm the clipper
// saw. The float64 ghost sum alone with MulDown's scaling (the code
// before) failed it.
func TestSeqGhostBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	const in, out = 24, 16
	for trial := range 300 {
		L := 2 + trial%3*2
		kind := trial / 3 % 4
		X, G := ghostInputs(rng, kind, L, in, out)
		for _, f := range []float64{1, 0.3, 0.7071, 1e-5, 1e-30} {
			p := &SeqPlan{ghosts: []ghostW{{w: Param{0, in * out}, in: in, out: out}}}
			w := &seqWorker{
				gX: [][]float32{X}, g: [][]float32{append([]float32(nil), G...)},
				sq: make([]float64, 1), c: []float64{f}, acc: make([]float32, in*out), gr: make([]float64, 1),
				xd: make([]float64, L*in), gd: make([]float64, L*out), gx: make([]float64, L*L), gg: make([]float64, L*L),
			}
			p.norms(w, L)
			p.accumulate(w, L)
			got := exactNormSq(X, w.g[0], L, in, out) // G as accumulate scaled it
			bound := f * (1 + 0x1p-24) * (1 + 0x1p-24)
			bound *= bound * w.sq[0]
			if got > bound {
				t.Fatalf("trial %d (kind %d, L %d, f %g): clipped norm^2 %.17g > bound %.17g", trial, kind, L, f, got, bound)
			}
		}
	}
}

// TestGhostWRN: WideResNet-16-4's 8x8 layers (ghost norms from the input
// maps GroupNorm writes) give the squared norms (within 1e-6) and clipped
// sum (within 1e-6) of the same plan with the norms of the recomputed
// gradients.
func TestGhostWRN(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	net, params := wrnNet(16, rng)
	const n = 3
	x := make([]float32, n*net.Input.Size())
	for k := range x {
		x[k] = float32(rng.NormFloat64())
	}
	y := []int{1, 4, 7}
	var sums [2][]float32
	var sqs [2][][]float64
	for k, noGhost := range []bool{false, true} {
		p, err := NewPlan(net, params, Options{MaxBatch: n, Workers: 1, noGhost: noGhost})
		if err != nil {
			t.Fatal(err)
		}
		ghosts := 0
		for _, s := range p.stages {
			if s.ghost {
				ghosts++
			}
		}
		if want := map[bool]int{false: 3, true: 0}[noGhost]; ghosts != want {
			t.Fatalf("noGhost %v: %d ghost convolutions, want %d", noGhost, ghosts, want)
		}
		cl := &testClipper{sq: make([][]float64, n)}
		sums[k] = make([]float32, len(params))
		if _, err := p.Step(x, y, sums[k], cl); err != nil {
			t.Fatal(err)
		}
		sqs[k] = cl.sq
	}
	for i := range n {
		for l, want := range sqs[1][i] {
			if got := sqs[0][i][l]; !(math.Abs(got-want) <= 1e-6*want) {
				t.Errorf("example %d layer %d: squared norm %v, recomputed %v", i, l, got, want)
			}
		}
	}
	if d := relDiff(sums[0], sums[1]); !(d <= 1e-6) {
		t.Errorf("clipped sum rel diff %.2g", d)
	}
}

// TestWidenTo: widening float32 to float64 (the vector kernel and the
// loop for the tail) gives each value's float64 exactly, specials
// (subnormals, infinities, NaN, -0) included, for every length's tail,
// and writes nothing past len(v).
func TestWidenTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	for n := range 70 {
		v := make([]float32, n)
		randSpecial(rng, v)
		d := make([]float64, n+1)
		d[n] = 7
		widenTo(d, v)
		for k, x := range v {
			if want := float64(x); math.Float64bits(d[k]) != math.Float64bits(want) {
				t.Fatalf("n %d: d[%d] = %v (%#x), want %v (%#x)", n, k, d[k], math.Float64bits(d[k]), want, math.Float64bits(want))
			}
		}
		if d[n] != 7 {
			t.Fatalf("n %d: wrote past the end", n)
		}
	}
}
