package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// refSeqLoss is an independent float64 forward pass of a Transformer on
// one example (ids without padding) with label y: plain loops, one head
// at a time, no GEMM.
func refSeqLoss(t *Transformer, p []float64, ids []int, y int) (float64, [][]float64) {
	D, L, nh := t.Dim, len(ids), t.Heads
	dh := D / nh
	eps := t.Eps
	if eps == 0 {
		eps = 1e-5
	}
	P := func(q Param) []float64 { return p[q.Offset : q.Offset+q.Len] }
	ln := func(n Norm, x [][]float64) [][]float64 {
		out := make([][]float64, len(x))
		for i, r := range x {
			m, v := 0.0, 0.0
			for _, a := range r {
				m += a
			}
			m /= float64(D)
			for _, a := range r {
				v += (a - m) * (a - m)
			}
			v /= float64(D)
			out[i] = make([]float64, D)
			for k, a := range r {
				out[i][k] = (a-m)/math.Sqrt(v+eps)*P(n.Weight)[k] + P(n.Bias)[k]
			}
		}
		return out
	}
	lin := func(l Linear, x [][]float64, in, out int) [][]float64 {
		W, A, B := P(l.Weight), P(l.LoRAA), P(l.LoRAB)
		r := t.LoRARank
		res := make([][]float64, len(x))
		for i, row := range x {
			res[i] = make([]float64, out)
			for o := range out {
				s := 0.0
				if l.Bias.Len > 0 {
					s = P(l.Bias)[o]
				}
				for k := range in {
					s += row[k] * W[k*out+o]
				}
				if l.LoRAA.Len > 0 {
					for j := range r {
						u := 0.0
						for k := range in {
							u += row[k] * A[k*r+j]
						}
						s += t.LoRAAlpha / float64(r) * u * B[j*out+o]
					}
				}
				res[i][o] = s
			}
		}
		return res
	}
	add := func(a, b [][]float64) [][]float64 {
		out := make([][]float64, len(a))
		for i := range a {
			out[i] = make([]float64, len(a[i]))
			for k := range a[i] {
				out[i][k] = a[i][k] + b[i][k]
			}
		}
		return out
	}
	gelu := func(x float64) float64 {
		if t.ExactGELU {
			return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
		}
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	h := make([][]float64, L)
	for i, id := range ids {
		h[i] = make([]float64, D)
		for k := range D {
			pos := 0.0
			if t.Positions == LearnedPositions {
				pos = P(t.Wpe)[i*D+k]
			} else {
				a := float64(i) / math.Pow(10000, float64(k-k%2)/float64(D))
				pos = math.Sin(a)
				if k%2 == 1 {
					pos = math.Cos(a)
				}
			}
			h[i][k] = P(t.Wte)[id*D+k] + pos
		}
	}
	if t.PostNorm {
		h = ln(t.Final, h)
	}
	attn := func(b TransformerBlock, x [][]float64) [][]float64 {
		qkv := lin(b.Attn, x, D, 3*D)
		out := make([][]float64, L)
		for i := range out {
			out[i] = make([]float64, D)
		}
		for hd := range nh {
			for i := range L {
				n := L
				if t.Causal {
					n = i + 1
				}
				s := make([]float64, n)
				mx := math.Inf(-1)
				for j := range n {
					for k := range dh {
						s[j] += qkv[i][hd*dh+k] * qkv[j][D+hd*dh+k]
					}
					s[j] /= math.Sqrt(float64(dh))
					mx = max(mx, s[j])
				}
				z := 0.0
				for j := range n {
					s[j] = math.Exp(s[j] - mx)
					z += s[j]
				}
				for j := range n {
					for k := range dh {
						out[i][hd*dh+k] += s[j] / z * qkv[j][2*D+hd*dh+k]
					}
				}
			}
		}
		return lin(b.Proj, out, D, D)
	}
	mlp := func(b TransformerBlock, x [][]float64) [][]float64 {
		z := lin(b.FC, x, D, t.Hidden)
		for _, r := range z {
			for k := range r {
				r[k] = gelu(r[k])
			}
		}
		return lin(b.FC2, z, t.Hidden, D)
	}
	for _, b := range t.Blocks {
		if t.PostNorm {
			h = ln(b.Ln1, add(h, attn(b, h)))
			h = ln(b.Ln2, add(h, mlp(b, h)))
		} else {
			h = add(h, attn(b, ln(b.Ln1, h)))
			h = add(h, mlp(b, ln(b.Ln2, h)))
		}
	}
	if !t.PostNorm {
		h = ln(t.Final, h)
	}
	ce := func(z []float64, y int) float64 {
		mx := math.Inf(-1)
		for _, v := range z {
			mx = max(mx, v)
		}
		s := 0.0
		for _, v := range z {
			s += math.Exp(v - mx)
		}
		return mx + math.Log(s) - z[y]
	}
	if t.Classes > 0 {
		r := 0
		if t.Causal {
			r = L - 1
		}
		z := lin(t.Head, h[r:r+1], D, t.Classes)
		return ce(z[0], y), z
	}
	var logits [][]float64
	if t.Head.Weight.Len > 0 {
		logits = lin(t.Head, h, D, t.Vocab)
	} else {
		logits = make([][]float64, L)
		for i := range L {
			logits[i] = make([]float64, t.Vocab)
			for v := range t.Vocab {
				for k := range D {
					logits[i][v] += h[i][k] * P(t.Wte)[v*D+k]
				}
			}
		}
	}
	loss := 0.0
	for i := 0; i+1 < L; i++ {
		loss += ce(logits[i], ids[i+1])
	}
	if L > 1 {
		loss /= float64(L - 1)
	}
	return loss, logits
}

// seqCase lays out a small transformer with random parameters.
type seqCase struct {
	name                                string
	vocab, ctx, dim, heads, hid, blocks int
	causal, post, sinus, exact          bool
	classes, rank                       int
	freeze, untied                      bool
}

func (c seqCase) build(seed uint64) (Transformer, []float32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	t := Transformer{Vocab: c.vocab, Context: c.ctx, Dim: c.dim, Heads: c.heads, Hidden: c.hid,
		Causal: c.causal, PostNorm: c.post, ExactGELU: c.exact, Classes: c.classes, FreezeBase: c.freeze}
	if c.sinus {
		t.Positions = SinusoidalPositions
	}
	if c.rank > 0 {
		t.LoRARank, t.LoRAAlpha = c.rank, 2*float64(c.rank)
	}
	var params []float32
	type kind int
	alloc := func(n int, k kind) Param {
		q := Param{Offset: len(params), Len: n}
		for range n {
			v := float32(rng.NormFloat64() * 0.4)
			if k == 1 {
				v = 1 + v/2
			}
			params = append(params, v)
		}
		return q
	}
	D := c.dim
	t.Wte = alloc(c.vocab*D, 0)
	if !c.sinus {
		t.Wpe = alloc(c.ctx*D, 0)
	}
	norm := func() Norm { return Norm{alloc(D, 1), alloc(D, 0)} }
	lin := func(in, out int) Linear {
		l := Linear{Weight: alloc(in*out, 0), Bias: alloc(out, 0)}
		if c.rank > 0 {
			l.LoRAA, l.LoRAB = alloc(in*c.rank, 0), alloc(c.rank*out, 0)
		}
		return l
	}
	for range c.blocks {
		t.Blocks = append(t.Blocks, TransformerBlock{Ln1: norm(), Attn: lin(D, 3*D), Proj: lin(D, D), Ln2: norm(), FC: lin(D, c.hid), FC2: lin(c.hid, D)})
	}
	t.Final = norm()
	if c.classes > 0 {
		t.Head = Linear{Weight: alloc(D*c.classes, 0), Bias: alloc(c.classes, 0)}
	} else if c.untied {
		t.Head = Linear{Weight: alloc(D*c.vocab, 0)}
	}
	return t, params
}

var seqCases = []seqCase{
	{name: "gpt2", vocab: 11, ctx: 6, dim: 8, heads: 2, hid: 12, blocks: 2, causal: true},
	{name: "gpt2-ghost", vocab: 13, ctx: 3, dim: 8, heads: 2, hid: 16, blocks: 1, causal: true},
	{name: "bert-cls", vocab: 9, ctx: 5, dim: 8, heads: 4, hid: 10, blocks: 2, post: true, sinus: true, exact: true, classes: 3},
	{name: "gpt2-cls-untied-lora", vocab: 10, ctx: 4, dim: 6, heads: 3, hid: 8, blocks: 1, causal: true, classes: 2, rank: 2},
	{name: "lora-frozen", vocab: 11, ctx: 5, dim: 8, heads: 2, hid: 12, blocks: 2, causal: true, rank: 2, freeze: true},
	{name: "cls-frozen-lora", vocab: 9, ctx: 5, dim: 8, heads: 2, hid: 8, blocks: 1, causal: true, classes: 3, rank: 1, freeze: true},
	// longer than a causal attention's row block (attnBlock)
	{name: "gpt2-long", vocab: 7, ctx: attnBlock + 8, dim: 4, heads: 2, hid: 6, blocks: 1, causal: true},
	{name: "untied-bidir", vocab: 7, ctx: 4, dim: 4, heads: 1, hid: 6, blocks: 1, untied: true, sinus: true},
}

// seqBatch draws n examples, some padded.
func seqBatch(rng *rand.Rand, t *Transformer, n int) ([]float32, []int) {
	x := make([]float32, n*t.Context)
	y := make([]int, n)
	for i := range n {
		L := t.Context - rng.IntN(min(3, t.Context))
		for k := range t.Context {
			x[i*t.Context+k] = -1
			if k < L {
				x[i*t.Context+k] = float32(rng.IntN(t.Vocab))
			}
		}
		if t.Classes > 0 {
			y[i] = rng.IntN(t.Classes)
		}
	}
	return x, y
}

func idsOf(row []float32) []int {
	var ids []int
	for _, v := range row {
		if v == -1 {
			break
		}
		ids = append(ids, int(v))
	}
	return ids
}

// TestSeqGradients checks every per-example gradient (every trained
// parameter) against central differences of the float64 reference, and
// each example's loss against the reference's.
// Every case runs with the norms chosen by cost, then with every weight
// materialized and with every weight a ghost (a classifier's head too).
func TestSeqGradients(t *testing.T) {
	for ci, c := range seqCases {
		for _, rule := range seqNormRules {
			t.Run(c.name+"/"+rule.name, func(t *testing.T) {
				seqGradients(t, ci, c, rule.r)
			})
		}
	}
}

var seqNormRules = []struct {
	name string
	r    seqNormRule
}{{"by-cost", normsByCost}, {"materialized", normsAllMaterialized}, {"ghost", normsAllGhost}}

func seqGradients(t *testing.T, ci int, c seqCase, rule seqNormRule) {
	tr, params := c.build(uint64(ci))
	rng := rand.New(rand.NewPCG(uint64(ci), 9))
	n := 3
	x, y := seqBatch(rng, &tr, n)
	plan, err := NewSeqPlan(tr, params, Options{MaxBatch: n, Workers: 2, seqNorms: rule})
	if err != nil {
		t.Fatal(err)
	}
	if (c.name == "gpt2-ghost" && rule == normsByCost || rule == normsAllGhost && !tr.FreezeBase) && plan.Ghost() == 0 {
		t.Fatal("no ghost layer")
	}
	if rule == normsAllMaterialized && plan.Ghost() != 0 {
		t.Fatal("ghost layers left")
	}
	grads := make([][]float32, n)
	for i := range grads {
		grads[i] = make([]float32, len(params))
	}
	loss, err := plan.Gradients(x, y, grads)
	if err != nil {
		t.Fatal(err)
	}
	p64 := make([]float64, len(params))
	for k, v := range params {
		p64[k] = float64(v)
	}
	trained := make([]bool, len(params))
	for _, q := range plan.train {
		for k := range q.Len {
			trained[q.Offset+k] = true
		}
	}
	for i := range n {
		ids := idsOf(x[i*tr.Context : (i+1)*tr.Context])
		want, _ := refSeqLoss(&tr, p64, ids, y[i])
		if d := math.Abs(loss[i] - want); d > 1e-5*max(1, want) {
			t.Errorf("example %d: loss %v, reference %v", i, loss[i], want)
		}
		const h = 1e-6
		bad := 0
		for k := range params {
			g := float64(grads[i][k])
			if !trained[k] {
				if g != 0 {
					t.Fatalf("example %d: frozen parameter %d has gradient %v", i, k, g)
				}
				continue
			}
			v := p64[k]
			p64[k] = v + h
			up, _ := refSeqLoss(&tr, p64, ids, y[i])
			p64[k] = v - h
			dn, _ := refSeqLoss(&tr, p64, ids, y[i])
			p64[k] = v
			fd := (up - dn) / (2 * h)
			if math.Abs(fd-g) > 2e-4*max(1, math.Abs(fd)) {
				if bad++; bad < 5 {
					t.Errorf("example %d parameter %d: gradient %v, central difference %v", i, k, g, fd)
				}
			}
		}
	}
}

// flatClip clips each example's whole gradient to norm C.
type flatClip struct{ C float64 }

func (f flatClip) Scale(_ int, sq []float64, _ float64, c []float64) {
	s := 0.0
	for _, v := range sq {
		s += v
	}
	k := min(1, f.C/math.Sqrt(s))
	for i := range c {
		c[i] = k
	}
}

// TestSeqNormsAndClippedSum checks each example's per-group squared norms
// (ghost or materialized) against the squared norms of its materialized
// gradient, each example run in a batch against the same example alone,
// and the clipped sum of a step against the sum of the clipped
// per-example gradients.
func TestSeqNormsAndClippedSum(t *testing.T) {
	for ci, c := range seqCases {
		for _, rule := range seqNormRules {
			t.Run(c.name+"/"+rule.name, func(t *testing.T) {
				seqNormsAndClippedSum(t, ci, c, rule.r)
			})
		}
	}
}

func seqNormsAndClippedSum(t *testing.T, ci int, c seqCase, rule seqNormRule) {
	tr, params := c.build(uint64(ci))
	rng := rand.New(rand.NewPCG(uint64(ci), 11))
	n := 5
	x, y := seqBatch(rng, &tr, n)
	plan, err := NewSeqPlan(tr, params, Options{MaxBatch: n, Workers: 2, seqNorms: rule})
	if err != nil {
		t.Fatal(err)
	}
	grads := make([][]float32, n)
	for i := range grads {
		grads[i] = make([]float32, len(params))
	}
	if _, err := plan.Gradients(x, y, grads); err != nil {
		t.Fatal(err)
	}
	sq, _, err := plan.Norms(x, y)
	if err != nil {
		t.Fatal(err)
	}
	// The groups' parameter ranges, from the plan.
	unitOf := map[Param]int{}
	for _, pc := range plan.pieces {
		unitOf[pc.p] = pc.unit
	}
	for _, g := range plan.ghosts {
		unitOf[g.w] = g.unit
	}
	one, err := NewSeqPlan(tr, params, Options{MaxBatch: 1, Workers: 1, seqNorms: rule})
	if err != nil {
		t.Fatal(err)
	}
	alone := [][]float32{make([]float32, len(params))}
	for i := range n {
		want := make([]float64, plan.Affine())
		for q, u := range unitOf {
			for _, v := range grads[i][q.Offset : q.Offset+q.Len] {
				want[u] += float64(v) * float64(v)
			}
		}
		for u := range want {
			if math.Abs(sq[i][u]-want[u]) > 1e-5*want[u]+1e-12 {
				t.Errorf("example %d group %d: norm^2 %v, materialized %v", i, u, sq[i][u], want[u])
			}
		}
		if _, err := one.Gradients(x[i*tr.Context:(i+1)*tr.Context], y[i:i+1], alone); err != nil {
			t.Fatal(err)
		}
		for k, v := range alone[0] {
			if v != grads[i][k] {
				t.Fatalf("example %d parameter %d: %v in the batch, %v alone", i, k, grads[i][k], v)
			}
		}
	}
	const C = 0.5
	dst := make([]float32, len(params))
	if _, err := plan.Step(x, y, dst, flatClip{C}); err != nil {
		t.Fatal(err)
	}
	want := make([]float64, len(params))
	for i := range n {
		s := 0.0
		for _, v := range sq[i] {
			s += v
		}
		f := min(1, C/math.Sqrt(s))
		for k, v := range grads[i] {
			want[k] += f * float64(v)
		}
	}
	for k, v := range dst {
		if math.Abs(float64(v)-want[k]) > 1e-5*(1+math.Abs(want[k])) {
			t.Fatalf("parameter %d: clipped sum %v, want %v", k, v, want[k])
		}
	}
}

// TestSeqMask checks that a causal model's output at a position does not
// depend on later tokens and that padding is never attended: a padded
// example's logits equal those of the same tokens in a model whose
// context is their length.
func TestSeqMask(t *testing.T) {
	for ci, c := range seqCases {
		tr, params := c.build(uint64(ci))
		if tr.Classes > 0 {
			continue
		}
		plan, err := NewSeqPlan(tr, params, Options{MaxBatch: 2, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		T, V := tr.Context, tr.Vocab
		x := make([]float32, 2*T)
		for k := range T {
			x[k], x[T+k] = float32(k%V), float32(k%V)
		}
		x[2*T-1] = float32((T + 3) % V)
		if x[2*T-1] == x[T-1] {
			x[2*T-1] = float32((T + 4) % V)
		}
		logits := make([]float32, 2*plan.Outputs())
		if err := plan.Forward(x, logits); err != nil {
			t.Fatal(err)
		}
		for k := range (T - 1) * V {
			same := logits[k] == logits[plan.Outputs()+k]
			if tr.Causal && !same {
				t.Fatalf("%s: causal logit %d changed with the last token", c.name, k)
			}
		}
		// Padding: context T with the last token padded vs context T-1.
		short := tr
		short.Context = T - 1
		if short.Wpe.Len > 0 {
			short.Wpe.Len = (T - 1) * tr.Dim
		}
		sp, err := NewSeqPlan(short, params, Options{MaxBatch: 1, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		x[T-1] = -1
		if err := plan.Forward(x[:T], logits[:plan.Outputs()]); err != nil {
			t.Fatal(err)
		}
		sl := make([]float32, sp.Outputs())
		if err := sp.Forward(x[:T-1], sl); err != nil {
			t.Fatal(err)
		}
		for k, v := range sl {
			if v != logits[k] {
				t.Fatalf("%s: logit %d with padding %v, without %v", c.name, k, logits[k], v)
			}
		}
	}
}

// TestSeqRefusals checks that bad ids, padding inside a sequence and
// inconsistent sizes are refused.
func TestSeqRefusals(t *testing.T) {
	tr, params := seqCases[0].build(1)
	plan, err := NewSeqPlan(tr, params, Options{MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	T := tr.Context
	dst := make([]float32, len(params))
	for _, row := range [][]float32{
		{-1, 1, 2, 3, 4, 5}, {1, -1, 2, 3, 4, 5}, {1, 2, 11, 0, 0, 0}, {1, 2.5, 0, 0, 0, 0}, {float32(math.NaN()), 0, 0, 0, 0, 0},
	} {
		if _, err := plan.Step(row[:T], []int{0}, dst, nil); err == nil {
			t.Errorf("%v accepted", row)
		}
	}
	bad := tr
	bad.Heads = 3
	if _, err := NewSeqPlan(bad, params, Options{MaxBatch: 1}); err == nil {
		t.Error("3 heads for dimension 8 accepted")
	}
	bad = tr
	bad.Wte.Offset = len(params)
	if _, err := NewSeqPlan(bad, params, Options{MaxBatch: 1}); err == nil {
		t.Error("parameters outside the buffer accepted")
	}
}

// TestSeqNonFinite: an example whose gradient overflows contributes
// nothing, its clipper sees NaN norms and its loss is NaN; the others are
// summed as without it.
func TestSeqNonFinite(t *testing.T) {
	tr, params := seqCases[len(seqCases)-1].build(3) // untied: wte is read by lookups only
	// A NaN embedding row for token 6 poisons the examples that use it.
	for k := range tr.Dim {
		params[tr.Wte.Offset+6*tr.Dim+k] = float32(math.NaN())
	}
	plan, err := NewSeqPlan(tr, params, Options{MaxBatch: 2, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{1, 2, 3, 4, 6, 2, 3, 4}
	rec := &recorder{sq: make([][]float64, 2)}
	dst := make([]float32, len(params))
	loss, err := plan.Step(x, []int{0, 0}, dst, rec)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(loss[1]) || !math.IsNaN(rec.sq[1][0]) || math.IsNaN(loss[0]) {
		t.Fatalf("losses %v, norms %v", loss, rec.sq[1])
	}
	alone := make([]float32, len(params))
	if _, err := plan.Step(x[:4], []int{0}, alone, nil); err != nil {
		t.Fatal(err)
	}
	for k, v := range alone {
		if dst[k] != v {
			t.Fatalf("parameter %d: %v with the bad example, %v without", k, dst[k], v)
		}
	}
	grads := [][]float32{make([]float32, len(params)), make([]float32, len(params))}
	grads[1][0] = 1
	if _, err := plan.Gradients(x, []int{0, 0}, grads); err != nil {
		t.Fatal(err)
	}
	for _, v := range grads[1] {
		if v != 0 {
			t.Fatal("a dropped example's gradient is not zero")
		}
	}
}

// TestSeqLastLogits: LastLogits gives Forward's logits at each example's
// last real token.
func TestSeqLastLogits(t *testing.T) {
	for ci, c := range seqCases {
		tr, params := c.build(uint64(ci))
		plan, err := NewSeqPlan(tr, params, Options{MaxBatch: 2, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(ci), 5))
		x, _ := seqBatch(rng, &tr, 5)
		all := make([]float32, 5*plan.Outputs())
		if err := plan.Forward(x, all); err != nil {
			t.Fatal(err)
		}
		k := plan.Outputs()
		if tr.Classes == 0 {
			k = tr.Vocab
		}
		last := make([]float32, 5*k)
		if err := plan.LastLogits(x, last); err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			L := len(idsOf(x[i*tr.Context : (i+1)*tr.Context]))
			want := all[i*plan.Outputs():]
			if tr.Classes == 0 {
				want = want[(L-1)*tr.Vocab:]
			}
			for j := range k {
				if d := math.Abs(float64(last[i*k+j] - want[j])); d > 1e-6*(1+math.Abs(float64(want[j]))) {
					t.Fatalf("%s example %d logit %d: %v, Forward %v", c.name, i, j, last[i*k+j], want[j])
				}
			}
		}
	}
}

// TestSeqLosses: the forward-only losses equal Step's.
func TestSeqLosses(t *testing.T) {
	for ci, c := range seqCases {
		tr, params := c.build(uint64(ci))
		plan, err := NewSeqPlan(tr, params, Options{MaxBatch: 4, Workers: 2})
		if err != nil {
			t.Fatal(err)
		}
		x, y := seqBatch(rand.New(rand.NewPCG(uint64(ci), 8)), &tr, 4)
		got, err := plan.Losses(x, y)
		if err != nil {
			t.Fatal(err)
		}
		got = append([]float64(nil), got...)
		want, err := plan.Step(x, y, make([]float32, len(params)), nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s example %d: loss %v, Step's %v", c.name, i, got[i], want[i])
			}
		}
	}
}
