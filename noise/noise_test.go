package noise

import (
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// Test factorizations, built here from the foundation types alone.

func testSeed(b byte) *dpcore.Seed {
	var s dpcore.Seed
	for i := range s {
		s[i] = b + byte(i)
	}
	return &s
}

func prefixW(t testing.TB, n int) dpcore.Workload {
	w, err := dpcore.PrefixSum(n)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func momentumW(t testing.TB, n int) dpcore.Workload {
	w, err := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.25, 0.05))
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// squareFact returns the factorization with square invertible encoder c and
// decoder B = A C^-1.
func squareFact(t testing.TB, w dpcore.Workload, c *mat.Dense, meta mfnoise.Metadata) *mfnoise.Factorization {
	a, err := w.Matrix()
	if err != nil {
		t.Fatal(err)
	}
	var ct mat.Dense // C^T B^T = A^T
	if err := ct.Solve(c.T(), a.T()); err != nil {
		t.Fatal(err)
	}
	f, err := mfnoise.NewFactorization(w, c, mat.DenseCopyOf(ct.T()), meta)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// randBanded is a random well-conditioned lower-triangular b-banded matrix:
// diagonal in [1, 2], off-diagonal entries of size at most 0.5/b.
func randBanded(n, b int, rng *mrand.Rand) *mat.Dense {
	c := mat.NewDense(n, n, nil)
	for i := range n {
		c.Set(i, i, 1+rng.Float64())
		for j := max(0, i-b+1); j < i; j++ {
			c.Set(i, j, (rng.Float64()-0.5)/float64(b))
		}
	}
	return c
}

// randDenseLower is the lower Cholesky factor of I + R R^T / n, R Gaussian:
// dense, lower triangular and well conditioned.
func randDenseLower(n int, rng *mrand.Rand) *mat.Dense {
	r := mat.NewDense(n, n, nil)
	for i := range n {
		for j := range n {
			r.Set(i, j, rng.NormFloat64())
		}
	}
	x := mat.NewSymDense(n, nil)
	x.SymOuterK(1/float64(n), r)
	for i := range n {
		x.SetSym(i, i, x.At(i, i)+1)
	}
	var ch mat.Cholesky
	if !ch.Factorize(x) {
		panic("not PD")
	}
	var l mat.TriDense
	ch.LTo(&l)
	return mat.DenseCopyOf(&l)
}

func blockDiag(blocks ...*mat.Dense) *mat.Dense {
	var r, c int
	for _, b := range blocks {
		br, bc := b.Dims()
		r, c = r+br, c+bc
	}
	out := mat.NewDense(r, c, nil)
	r, c = 0, 0
	for _, b := range blocks {
		br, bc := b.Dims()
		out.Slice(r, r+br, c, c+bc).(*mat.Dense).Copy(b)
		r, c = r+br, c+bc
	}
	return out
}

// treeEncoder is the binary-tree encoder over n steps (SPEC 5.2): one row per
// node of the tree over N = 2^ceil(log2 n) leaves, with ones over the steps
// the node covers (virtual steps dropped). It also returns each node's
// range [lo, hi).
func treeEncoder(n int) (*mat.Dense, [][2]int) {
	nl := 1
	for nl < n {
		nl *= 2
	}
	var ranges [][2]int
	for size := 1; size <= nl; size *= 2 {
		for lo := 0; lo < nl; lo += size {
			ranges = append(ranges, [2]int{lo, lo + size})
		}
	}
	c := mat.NewDense(len(ranges), n, nil)
	for v, r := range ranges {
		for j := r[0]; j < min(r[1], n); j++ {
			c.Set(v, j, 1)
		}
	}
	return c, ranges
}

// treeOnlineDecoder is the plain online tree decoder for the prefix sum:
// prefix i is the sum of the nodes of the dyadic decomposition of [0, i].
// It is sparse, and its z's live O(log n) steps at a time.
func treeOnlineDecoder(n int, ranges [][2]int) *mat.Dense {
	b := mat.NewDense(n, len(ranges), nil)
	index := map[[2]int]int{}
	for v, r := range ranges {
		index[r] = v
	}
	for i := range n {
		lo := 0
		end := i + 1
		for lo < end {
			size := 1
			for lo%(2*size) == 0 && lo+2*size <= end {
				size *= 2
			}
			b.Set(i, index[[2]int{lo, lo + size}], 1)
			lo += size
		}
	}
	return b
}

// treeHonakerDecoder is the online Honaker decoder ("estimator from below",
// SPEC 5.2): each subtree v of the dyadic decomposition of [0, i] is
// estimated from all its descendants, the level-j sums (2^j nodes below v)
// weighted proportionally to 2^-j. Its G = S^-1 B is denser than the plain
// online decoder's: a leaf is used until the root completes.
func treeHonakerDecoder(n int, ranges [][2]int) *mat.Dense {
	b := mat.NewDense(n, len(ranges), nil)
	index := map[[2]int]int{}
	for v, r := range ranges {
		index[r] = v
	}
	for i := range n {
		lo, end := 0, i+1
		for lo < end {
			size := 1
			for lo%(2*size) == 0 && lo+2*size <= end {
				size *= 2
			}
			norm := 0.0
			for s := size; s >= 1; s /= 2 {
				norm += float64(s) / float64(size)
			}
			for s := size; s >= 1; s /= 2 { // level with nodes of size s: weight ~ s/size = 2^-j
				for u := lo; u < lo+size; u += s {
					b.Set(i, index[[2]int{u, u + s}], b.At(i, index[[2]int{u, u + s}])+float64(s)/float64(size)/norm)
				}
			}
			lo += size
		}
	}
	return b
}

// onlineTreeFact is the tree with the online decoder for workload w
// (post-processed from the prefix sum: B = A S^-1 B_S).
func onlineTreeFact(t testing.TB, w dpcore.Workload) *mfnoise.Factorization {
	return treeFact(t, w, false)
}

func treeFact(t testing.TB, w dpcore.Workload, honaker bool) *mfnoise.Factorization {
	n := w.N
	c, ranges := treeEncoder(n)
	bs := treeOnlineDecoder(n, ranges)
	if honaker {
		bs = treeHonakerDecoder(n, ranges)
	}
	a, _ := w.Matrix()
	sinv := mat.NewDense(n, n, nil)
	for i := range n {
		sinv.Set(i, i, 1)
		if i > 0 {
			sinv.Set(i, i-1, -1)
		}
	}
	var as, b mat.Dense
	as.Mul(a, sinv)
	b.Mul(&as, bs)
	f, err := mfnoise.NewFactorization(w, c, &b, mfnoise.Metadata{Kind: "tree", Decoder: "online"})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func optimalFact(t testing.TB, w dpcore.Workload, c *mat.Dense, meta mfnoise.Metadata) *mfnoise.Factorization {
	a, _ := w.Matrix()
	b, err := mfnoise.OptimalDecoder(a, c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := mfnoise.NewFactorization(w, c, b, meta)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func randTall(m, n int, rng *mrand.Rand) *mat.Dense {
	c := mat.NewDense(m, n, nil)
	for i := range m {
		for j := range n {
			c.Set(i, j, rng.NormFloat64())
		}
	}
	return c
}

type namedFact struct {
	name string
	f    *mfnoise.Factorization
	kind string // expected Kind with no memory limit
}

// testFacts builds every structure the sources handle, for n steps.
func testFacts(t testing.TB, n int) []namedFact {
	rng := mrand.New(mrand.NewPCG(uint64(n), 1))
	var out []namedFact
	for _, w := range []dpcore.Workload{prefixW(t, n), momentumW(t, n)} {
		eye := mat.NewDense(n, n, nil)
		for i := range n {
			eye.Set(i, i, 1)
		}
		out = append(out, namedFact{"identity", squareFact(t, w, eye, mfnoise.Metadata{Kind: "dpsgd"}), KindIndependent})
		b := min(4, n)
		bandKind := KindBanded
		if b == n && n > 1 {
			bandKind = KindDenseStored
		}
		out = append(out, namedFact{"banded4", squareFact(t, w, randBanded(n, b, rng), mfnoise.Metadata{Kind: "bandmf", Bands: b}), bandKind})
		denseKind := KindDenseStored
		if n == 1 {
			denseKind = KindBanded
		}
		out = append(out, namedFact{"dense-lower", squareFact(t, w, randDenseLower(n, rng), mfnoise.Metadata{Kind: "mf-single"}), denseKind})
		tallKind, treeKind := KindTallBlocked, KindSparseLive
		if n == 1 { // every z is used once; the 1-leaf tree is C = [1]
			tallKind, treeKind = KindSparseLive, KindIndependent
		}
		out = append(out, namedFact{"tall-optimal", optimalFact(t, w, randTall(2*n, n, rng), mfnoise.Metadata{Decoder: "optimal"}), tallKind})
		out = append(out, namedFact{"tree-online", onlineTreeFact(t, w), treeKind})
		out = append(out, namedFact{"tree-honaker-online", treeFact(t, w, true), treeKind})
		if n%2 == 0 && n >= 4 {
			// Stamped: two blocks.
			h := n / 2
			sq := blockDiag(randDenseLower(h, rng), randDenseLower(h, rng))
			out = append(out, namedFact{"stamped-square", squareFact(t, w, sq, mfnoise.Metadata{Stamps: 2}), KindBanded})
			tc, _ := treeEncoder(h)
			// Block-diagonal G: liveness per block. Under momentum, rounding
			// residue of A^-1 B in the zero blocks can survive the
			// structural zero test (depending on n) and make G count as
			// dense: blocked is then chosen (and equally exact).
			stampKind := KindSparseLive
			if w.Kind == dpcore.MomentumKind {
				stampKind = KindSparseLive + "|" + KindTallBlocked
			}
			out = append(out, namedFact{"stamped-tree-optimal", optimalFact(t, w, blockDiag(tc, tc), mfnoise.Metadata{Stamps: 2, Decoder: "optimal"}), stampKind})
		}
	}
	return out
}

// refG returns the dense map G with W = G Z, computed independently of the
// sources: C^-1 for a square encoder, A^-1 B (by an LU solve) otherwise.
func refG(t testing.TB, f *mfnoise.Factorization) *mat.Dense {
	m, n := f.Encoder.Dims()
	var g mat.Dense
	if m == n {
		if err := g.Solve(f.Encoder, eyeDense(n)); err != nil {
			t.Fatal(err)
		}
		return &g
	}
	// A^-1 B has an inherent error of about cond(A) eps (the same for any
	// method); use the sources' triangular solve, without dropping
	// structural zeros, so the comparison isolates the streaming.
	a, _ := f.Workload.Matrix()
	if err := mat.NewTriDense(n, mat.Lower, lowerData(a)).SolveTo(&g, false, f.Decoder); err != nil {
		t.Fatal(err)
	}
	return &g
}

func eyeDense(n int) *mat.Dense {
	e := mat.NewDense(n, n, nil)
	for i := range n {
		e.Set(i, i, 1)
	}
	return e
}

// zRows regenerates z_1..z_m from the seed, as the sources draw them.
func zRows(seed *dpcore.Seed, m, d int) [][]float64 {
	k := key(*seed)
	keys, _ := rowKeys(k, m)
	z := make([][]float64, m)
	for j := range z {
		z[j] = make([]float64, d)
		genRow(keys[j], z[j])
	}
	return z
}

// streamAll runs a source to the end.
func streamAll[T floatT](t testing.TB, s streamer[T]) [][]T {
	c := s.base()
	out := make([][]T, c.n)
	for i := range out {
		out[i] = make([]T, c.d)
		if err := s.next(out[i]); err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
	}
	return out
}

// checkAgainstRef compares streamed rows with W = G Z, entry by entry, to
// tol times the natural scale of the dot product, sum_j |G_ij| |z_jk|, plus
// the standard deviation ||G_i||_2 of W_ik (the scale of the entries of G
// dropped as structural zeros, mfnoise.StructuralZeroTol max|G|, is below it).
func checkAgainstRef[T floatT](t *testing.T, got [][]T, g *mat.Dense, z [][]float64, tol float64) {
	t.Helper()
	n, m := g.Dims()
	d := len(z[0])
	worst := 0.0
	for i := range n {
		sd := mat.Norm(g.RowView(i), 2)
		for k := range d {
			ref, scale := 0.0, sd
			for j := range m {
				v := g.At(i, j) * z[j][k]
				ref += v
				scale += math.Abs(v)
			}
			if e := math.Abs(float64(got[i][k])-ref) / scale; e > worst {
				worst = e
				if e > tol {
					t.Fatalf("W[%d][%d] = %v, reference %v (relative error %.3g > %.0e)", i+1, k, got[i][k], ref, e, tol)
				}
			}
		}
	}
}

func TestNoiseExactness(t *testing.T) {
	ns := []int{1, 7, 64, 200}
	ds := []int{1, 33, 1000}
	if testing.Short() {
		ns = []int{1, 7, 64}
		ds = []int{1, 33}
	}
	seed := testSeed(9)
	for _, n := range ns {
		for _, nf := range testFacts(t, n) {
			g := refG(t, nf.f)
			m, _ := nf.f.Encoder.Dims()
			for _, d := range ds {
				name := fmt.Sprintf("%s/%s/n=%d/d=%d", nf.name, nf.f.Workload.Kind, n, d)
				t.Run(name, func(t *testing.T) {
					z := zRows(seed, m, d)
					s64, err := newNoiseSource[float64](nf.f, d, Options{Seed: seed})
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(strings.Split(nf.kind, "|"), s64.base().kind) {
						t.Fatalf("kind %q, want %q", s64.base().kind, nf.kind)
					}
					checkAgainstRef(t, streamAll(t, s64), g, z, 1e-12)
					s32, err := New(nf.f, d, Options{Seed: seed})
					if err != nil {
						t.Fatal(err)
					}
					checkAgainstRef(t, streamAll(t, s32.(source32).s), g, z, 1e-5)
				})
			}
		}
	}
}

// TestRegenerateMatchesStored forces the regenerating methods with a small
// memory budget: they must give the same W (same z's) as the fast ones.
func TestRegenerateMatchesStored(t *testing.T) {
	const n, d = 40, 50
	seed := testSeed(3)
	rng := mrand.New(mrand.NewPCG(5, 5))
	w := prefixW(t, n)
	cases := []struct {
		f      *mfnoise.Factorization
		budget int64
		kind   string
	}{
		// Minimum (regenerate everything): one shard of float64 and float64
		// accumulators, and the keys of the m noise rows.
		{squareFact(t, w, randDenseLower(n, rng), mfnoise.Metadata{}), 16*d + 32*n, KindDenseRegenerate},
		{squareFact(t, w, randBanded(n, 8, rng), mfnoise.Metadata{}), 16*d + 32*n, KindDenseRegenerate},
		{optimalFact(t, w, randTall(2*n, n, rng), mfnoise.Metadata{}), 16*d + 64*n + 8*d, KindTallRegenerate},
		{onlineTreeFact(t, momentumW(t, n)), 16*d + 32*127 + 2*8*d, KindLiveRegenerate},
	}
	for _, c := range cases {
		fast, err := newNoiseSource[float64](c.f, d, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		slow, err := newNoiseSource[float64](c.f, d, Options{Seed: seed, MemoryBudget: c.budget, Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		if slow.base().kind != c.kind {
			t.Fatalf("budget %d: kind %q, want %q", c.budget, slow.base().kind, c.kind)
		}
		want := streamAll(t, fast)
		slowRows := streamAll(t, slow)
		m, _ := c.f.Encoder.Dims()
		checkAgainstRef(t, slowRows, refG(t, c.f), zRows(seed, m, d), 1e-12)
		for i, got := range slowRows {
			if mb := slow.memoryBytes(); mb > c.budget {
				t.Fatalf("%s: memory %d over budget %d", c.kind, mb, c.budget)
			}
			for k := range got {
				if math.Abs(got[k]-want[i][k]) > 1e-11*(1+math.Abs(want[i][k])) {
					t.Fatalf("%s: W[%d][%d] = %v, fast method %v", c.kind, i+1, k, got[k], want[i][k])
				}
			}
		}
	}
}

func TestTreeOnlineMemoryIsLogarithmic(t *testing.T) {
	const n, d = 200, 10
	s, err := newNoiseSource[float32](onlineTreeFact(t, prefixW(t, n)), d, Options{Seed: testSeed(1), Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ls := s.(*liveSource[float32])
	// At most one held row per tree level (8 levels for 256 leaves).
	if ls.nslots > 8 || !ls.merged {
		t.Fatalf("peak held rows %d (merged %v), want <= log2(256) = 8", ls.nslots, ls.merged)
	}
	streamAll(t, s)
	if len(ls.pool) != ls.nslots {
		t.Fatalf("allocated %d buffers, planned %d", len(ls.pool), ls.nslots)
	}
	// Online Honaker: a leaf is used until the root completes, but all of
	// a complete subtree's nodes have proportional futures (level weights
	// 2^-j), so one slot per subtree of the decomposition suffices.
	for _, w := range []dpcore.Workload{prefixW(t, n), momentumW(t, n)} {
		s, err := newNoiseSource[float32](treeFact(t, w, true), d, Options{Seed: testSeed(1), Workers: 1})
		if err != nil {
			t.Fatal(err)
		}
		ls := s.(*liveSource[float32])
		t.Logf("%s: online Honaker tree: %d slots, merged %v, kind %s", w, ls.nslots, ls.merged, ls.kind)
		if ls.nslots > 9 || ls.kind != KindSparseLive {
			t.Fatalf("%s: online Honaker tree: %d slots (%s), want <= log2(256)+1 = 9", w, ls.nslots, ls.kind)
		}
	}
}

func TestStampedPerBlockMemory(t *testing.T) {
	const n, d = 64, 10
	rng := mrand.New(mrand.NewPCG(2, 2))
	h := n / 4
	sq := blockDiag(randDenseLower(h, rng), randDenseLower(h, rng), randDenseLower(h, rng), randDenseLower(h, rng))
	s, err := New(squareFact(t, prefixW(t, n), sq, mfnoise.Metadata{Stamps: 4}), d, Options{Seed: testSeed(1)})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.MemoryBytes(), int64((h-1)*d*4+32); got != want {
		t.Fatalf("stamped square: memory %d, want %d ((n/s - 1) rows)", got, want)
	}
	tc, _ := treeEncoder(h)
	tall := blockDiag(tc, tc, tc, tc)
	s2, err := newNoiseSource[float32](optimalFact(t, prefixW(t, n), tall, mfnoise.Metadata{Stamps: 4}), d, Options{Seed: testSeed(1)})
	if err != nil {
		t.Fatal(err)
	}
	if p, rows := s2.(*liveSource[float32]).nslots, 2*h-1; p > rows {
		t.Fatalf("stamped tree: peak %d held rows, want <= %d (one block)", p, rows)
	}
}

func TestNoiseCovariance(t *testing.T) {
	// Every coordinate is an independent draw of the n-vector W[:,k] ~
	// N(0, G G^T). With d = 40000 draws the empirical covariance entries
	// have standard error <= sqrt(2/d) * sqrt(S_ii S_jj); allow 5 standard
	// errors.
	const n, d = 6, 40000
	rng := mrand.New(mrand.NewPCG(7, 7))
	w := prefixW(t, n)
	facts := []*mfnoise.Factorization{
		squareFact(t, w, randBanded(n, 3, rng), mfnoise.Metadata{}),
		squareFact(t, w, randDenseLower(n, rng), mfnoise.Metadata{}),
		optimalFact(t, w, randTall(2*n, n, rng), mfnoise.Metadata{}),
		onlineTreeFact(t, w),
	}
	for fi, f := range facts {
		s, err := New(f, d, Options{Seed: testSeed(byte(fi))})
		if err != nil {
			t.Fatal(err)
		}
		rows := streamAll(t, s.(source32).s)
		g := refG(t, f)
		var want mat.Dense
		want.Mul(g, g.T())
		for i := range n {
			for j := range n {
				got := 0.0
				for k := range d {
					got += float64(rows[i][k]) * float64(rows[j][k])
				}
				got /= d
				se := math.Sqrt(2/float64(d)) * math.Sqrt(want.At(i, i)*want.At(j, j))
				if math.Abs(got-want.At(i, j)) > 5*se {
					t.Fatalf("%s: cov[%d,%d] = %v, want %v +- %v", s.Kind(), i, j, got, want.At(i, j), 5*se)
				}
			}
		}
		// Standardized marginals of the last step are N(0,1).
		xs := make([]float64, d)
		sd := math.Sqrt(want.At(n-1, n-1))
		for k := range xs {
			xs[k] = float64(rows[n-1][k]) / sd
		}
		if ks := ksStat(xs); ks > 1.95/math.Sqrt(d) {
			t.Fatalf("%s: KS statistic %v > %v", s.Kind(), ks, 1.95/math.Sqrt(d))
		}
	}
}

func TestNoiseCheckpointResume(t *testing.T) {
	const n, d = 12, shardLen + 70 // two shards
	for _, nf := range testFacts(t, n) {
		for _, budget := range []int64{0, 800000 + 2*d*4} {
			t.Run(fmt.Sprintf("%s/%s/budget=%d", nf.name, nf.f.Workload.Kind, budget), func(t *testing.T) {
				opt := Options{Seed: testSeed(4), MemoryBudget: budget}
				ref, err := New(nf.f, d, opt)
				if err != nil {
					t.Fatal(err)
				}
				want := make([][]float32, n)
				for i := range want {
					want[i] = make([]float32, d)
					if err := ref.Next(want[i]); err != nil {
						t.Fatal(err)
					}
				}
				for _, at := range []int{0, 1, 5, n} {
					a, _ := New(nf.f, d, opt)
					buf := make([]float32, d)
					for range at {
						a.Next(buf)
					}
					state, err := a.MarshalBinary()
					if err != nil {
						t.Fatal(err)
					}
					// A fresh source with another (crypto) seed; with no
					// budget the plan does not depend on the workers.
					workers := 0
					if budget == 0 {
						workers = 1
					}
					b, err := New(nf.f, d, Options{MemoryBudget: budget, Workers: workers})
					if err != nil {
						t.Fatal(err)
					}
					if err := b.UnmarshalBinary(state); err != nil {
						t.Fatal(err)
					}
					if b.Step() != at {
						t.Fatalf("restored step %d, want %d", b.Step(), at)
					}
					for i := at; i < n; i++ {
						if err := b.Next(buf); err != nil {
							t.Fatal(err)
						}
						if !slices.Equal(buf, want[i]) {
							t.Fatalf("%s: resumed at %d: step %d differs", b.Kind(), at, i+1)
						}
					}
					if err := b.Next(buf); !errors.Is(err, ErrExhausted) {
						t.Fatalf("past n: %v, want ErrExhausted", err)
					}
				}
			})
		}
	}
}

func TestNoiseWorkersDoNotChangeNoise(t *testing.T) {
	const n, d = 5, 3*shardLen + 11
	for _, nf := range testFacts(t, n+1)[:5] {
		var outs [2][]float32
		for wi, workers := range []int{1, 2} {
			s, err := New(nf.f, d, Options{Seed: testSeed(2), Workers: workers})
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]float32, d)
			for range n {
				if err := s.Next(buf); err != nil {
					t.Fatal(err)
				}
			}
			outs[wi] = buf
		}
		if !slices.Equal(outs[0], outs[1]) {
			t.Fatalf("%s: 1 and 2 workers give different noise", nf.name)
		}
	}
}

func TestNoiseErrors(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 1))
	w := prefixW(t, 6)
	f1 := squareFact(t, w, randBanded(6, 2, rng), mfnoise.Metadata{})
	f2 := squareFact(t, w, randBanded(6, 2, rng), mfnoise.Metadata{})
	ft := onlineTreeFact(t, w)
	opt := Options{Seed: testSeed(0)}
	s, err := New(f1, 10, opt)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Next(make([]float32, 9)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("wrong length: %v", err)
	}
	buf := make([]float32, 10)
	for range 6 {
		if err := s.Next(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Next(buf); !errors.Is(err, ErrExhausted) {
		t.Fatalf("past n: %v", err)
	}
	state, _ := s.MarshalBinary()
	for name, fn := range map[string]func() (Source, error){
		"other mechanism": func() (Source, error) { return New(f2, 10, opt) },
		"other d":         func() (Source, error) { return New(f1, 11, opt) },
		"other kind":      func() (Source, error) { return New(ft, 10, opt) },
		"independent":     func() (Source, error) { return NewIndependent(6, 10, opt) },
	} {
		o, err := fn()
		if err != nil {
			t.Fatal(err)
		}
		if err := o.UnmarshalBinary(state); !errors.Is(err, dpcore.ErrInvalid) {
			t.Fatalf("restore into %s: %v, want ErrInvalid", name, err)
		}
		if o.Step() != 0 {
			t.Fatalf("failed restore changed the step")
		}
	}
	// Same mechanism, another memory plan.
	fd := squareFact(t, w, randDenseLower(6, rng), mfnoise.Metadata{})
	fast, _ := New(fd, 1000, opt)
	slow, err := New(fd, 1000, Options{MemoryBudget: 15000, Workers: 1})
	if err != nil || slow.Kind() != KindDenseRegenerate || fast.Kind() != KindDenseStored {
		t.Fatalf("budget 15000: %v %v", slow, err)
	}
	fstate, _ := fast.MarshalBinary()
	if err := slow.UnmarshalBinary(fstate); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("restore into another plan: %v", err)
	}
	o, _ := New(f1, 10, opt)
	if err := o.UnmarshalBinary(state[:len(state)-1]); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("truncated state: %v", err)
	}
	if err := o.UnmarshalBinary([]byte("garbage")); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("garbage state: %v", err)
	}
	if _, err := New(f1, 0, opt); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("d = 0: %v", err)
	}
	if _, err := NewIndependent(0, 5, opt); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("n = 0: %v", err)
	}
	if _, err := New(ft, 1<<20, Options{MemoryBudget: 1000}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("budget below scratch: %v", err)
	}
	bad := *f1
	bad.Encoder = mat.DenseCopyOf(f1.Encoder)
	bad.Encoder.Set(3, 1, math.NaN())
	if _, err := New(&bad, 10, opt); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("NaN in the encoder: %v", err)
	}
	if _, err := New(nil, 10, opt); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("nil factorization: %v", err)
	}
}

func TestDefaultSeedIsFresh(t *testing.T) {
	a, _ := NewIndependent(1, 8, Options{})
	b, _ := NewIndependent(1, 8, Options{})
	x, y := make([]float32, 8), make([]float32, 8)
	a.Next(x)
	b.Next(y)
	if slices.Equal(x, y) {
		t.Fatal("two crypto-seeded sources gave the same noise")
	}
	c, _ := NewIndependent(1, 8, Options{Seed: testSeed(1)})
	e, _ := NewIndependent(1, 8, Options{Seed: testSeed(1)})
	c.Next(x)
	e.Next(y)
	if !slices.Equal(x, y) {
		t.Fatal("the same explicit seed gave different noise")
	}
}

// rankOneFact has encoder [I; I] and G = A^-1 B = [I - R, R] with R strictly
// lower triangular of rank one (R[i,j] = a_i b_j, i > j): after every step
// all past noise rows have proportional futures, so one slot suffices.
func rankOneFact(t testing.TB, w dpcore.Workload, rng *mrand.Rand) *mfnoise.Factorization {
	n := w.N
	a := make([]float64, n)
	bv := make([]float64, n)
	for i := range a {
		a[i], bv[i] = 0.5+rng.Float64(), rng.NormFloat64()
	}
	c := mat.NewDense(2*n, n, nil)
	g := mat.NewDense(n, 2*n, nil)
	for i := range n {
		c.Set(i, i, 1)
		c.Set(n+i, i, 1)
		g.Set(i, i, 1)
		for j := range i {
			g.Set(i, j, -a[i]*bv[j])
			g.Set(i, n+j, a[i]*bv[j])
		}
	}
	am, _ := w.Matrix()
	var b mat.Dense
	b.Mul(am, g)
	f, err := mfnoise.NewFactorization(w, c, &b, mfnoise.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestMergedFuturesExactAndSmall(t *testing.T) {
	const n, d = 50, 40
	seed := testSeed(8)
	for _, w := range []dpcore.Workload{prefixW(t, n), momentumW(t, n)} {
		f := rankOneFact(t, w, mrand.New(mrand.NewPCG(3, 4)))
		s, err := newNoiseSource[float64](f, d, Options{Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		ls := s.(*liveSource[float64])
		// For momentum, A^-1 B carries rounding residue of B (~1e-11 here)
		// above the merge tolerance: no merging then, still exact.
		if w.Kind == dpcore.PrefixSumKind && (!ls.merged || ls.nslots > 2 || ls.kind != KindSparseLive) {
			t.Fatalf("%s: kind %s merged %v with %d slots, want merged into <= 2", w, ls.kind, ls.merged, ls.nslots)
		}
		g := refG(t, f)
		z := zRows(seed, 2*n, d)
		checkAgainstRef(t, streamAll(t, s), g, z, 1e-12)
		// Regenerating everything (no merging) gives the same noise.
		slow, err := newNoiseSource[float64](f, d, Options{Seed: seed, MemoryBudget: 16*d + 64*n})
		if err != nil {
			t.Fatal(err)
		}
		if slow.base().kind != KindTallRegenerate {
			t.Fatalf("kind %s, want %s", slow.base().kind, KindTallRegenerate)
		}
		checkAgainstRef(t, streamAll(t, slow), g, z, 1e-12)
		s32, _ := New(f, d, Options{Seed: seed})
		checkAgainstRef(t, streamAll(t, s32.(source32).s), g, z, 1e-5)
	}
}

func TestWorkloadSolve(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(9, 9))
	const n = 30
	for _, w := range []dpcore.Workload{prefixW(t, n), momentumW(t, n)} {
		b := randTall(n, 2*n, rng)
		g, err := workloadSolve(w, b)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := w.Matrix()
		var ag mat.Dense
		ag.Mul(a, g)
		ag.Sub(&ag, b)
		if r := mat.Norm(&ag, 2) / mat.Norm(b, 2); r > 1e-13 {
			t.Fatalf("%s: ||A G - B|| / ||B|| = %v", w, r)
		}
	}
	w := dpcore.Workload{Kind: dpcore.MomentumKind, N: 3, Momentum: 0.5, Schedule: dpcore.Schedule{Explicit: []float64{1, 0, 1}}}
	if _, err := workloadSolve(w, mat.NewDense(3, 3, nil)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("zero learning rate: %v", err)
	}
}

func TestAxpy4KernelMatchesGo(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(4, 4))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 2048, 2051} {
		vec := func() []float32 {
			v := make([]float32, n)
			for k := range v {
				v[k] = float32(rng.NormFloat64())
			}
			return v
		}
		x, u, v, w, y := vec(), vec(), vec(), vec(), vec()
		y2 := slices.Clone(y)
		axpy4[float32](0.3, -1.7, 2.2, 1e-3, x, u, v, w, y)
		axpy4Go[float32](0.3, -1.7, 2.2, 1e-3, x, u, v, w, y2)
		if !slices.Equal(y, y2) {
			t.Fatalf("n = %d: kernel (avx2 %v) differs from Go", n, useAVX2)
		}
	}
}

// newBlockForTest builds a block source with block length bt for f.
func newBlockForTest[T floatT](t *testing.T, f *mfnoise.Factorization, d, bt int, seed *dpcore.Seed, workers int) *blockSource[T] {
	m, n := f.Encoder.Dims()
	var g *mat.Dense
	if m == n {
		var inv mat.TriDense
		if err := inv.InverseTri(mat.NewTriDense(n, mat.Lower, lowerData(f.Encoder))); err != nil {
			t.Fatal(err)
		}
		g = mat.DenseCopyOf(&inv)
	} else {
		var err error
		if g, err = workloadSolve(f.Workload, f.Decoder); err != nil {
			t.Fatal(err)
		}
	}
	lc, mech, err := newLiveCols(g)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newCommon[T](KindTallBlocked, n, m, d, Options{Workers: workers})
	if err != nil {
		t.Fatal(err)
	}
	c.mech = mech
	k, _ := newSeed(seed)
	return newBlock[T](lc, c, bt, k, m == n)
}

func TestBlockedExactAndResumable(t *testing.T) {
	const n, d = 23, shardLen + 300
	seed := testSeed(6)
	rng := mrand.New(mrand.NewPCG(6, 6))
	for _, f := range []*mfnoise.Factorization{
		squareFact(t, momentumW(t, n), randDenseLower(n, rng), mfnoise.Metadata{}),
		optimalFact(t, prefixW(t, n), randTall(2*n, n, rng), mfnoise.Metadata{}),
	} {
		m, _ := f.Encoder.Dims()
		z := zRows(seed, m, d)
		g := refG(t, f)
		for _, bt := range []int{1, 4, 8} {
			s := newBlockForTest[float64](t, f, d, bt, seed, 0)
			checkAgainstRef(t, streamAll(t, s), g, z, 1e-12)
		}
		// float32, and a restore mid-block into a one-worker source.
		ref := newBlockForTest[float32](t, f, d, 8, seed, 0)
		want := streamAll(t, ref)
		checkAgainstRef(t, want, g, z, 1e-5)
		a := newBlockForTest[float32](t, f, d, 8, seed, 0)
		buf := make([]float32, d)
		for range 11 {
			a.next(buf)
		}
		state, _ := marshalStreamer(a)
		b := newBlockForTest[float32](t, f, d, 8, testSeed(99), 1)
		if err := unmarshalStreamer(b, state); err != nil {
			t.Fatal(err)
		}
		for i := 11; i < n; i++ {
			b.next(buf)
			if !slices.Equal(buf, want[i]) {
				t.Fatalf("%s: resumed block source differs at step %d", b.kind, i+1)
			}
		}
	}
}

func TestBlockedChosenUnderBudget(t *testing.T) {
	const n, d = 16, 100000
	rng := mrand.New(mrand.NewPCG(8, 8))
	f := optimalFact(t, prefixW(t, n), randTall(2*n, n, rng), mfnoise.Metadata{})
	// All of Z needs 32 rows (12.8 MB); allow about 8 rows.
	budget := int64(8*d*4 + 2<<20)
	s, err := New(f, d, Options{Seed: testSeed(1), MemoryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind() != KindTallBlocked || s.MemoryBytes() > budget {
		t.Fatalf("kind %s, memory %d, want %s within %d", s.Kind(), s.MemoryBytes(), KindTallBlocked, budget)
	}
	full, _ := New(f, d, Options{Seed: testSeed(1)})
	x, y := make([]float32, d), make([]float32, d)
	for range n {
		s.Next(x)
		full.Next(y)
		for k := range x {
			if math.Abs(float64(x[k]-y[k])) > 1e-5*(1+math.Abs(float64(y[k]))) {
				t.Fatalf("blocked %v, pregenerated %v", x[k], y[k])
			}
		}
	}
}
