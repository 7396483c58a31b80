package data

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

func TestNewDatasetValidates(t *testing.T) {
	sh := Shape{1, 2, 2}
	ok := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	for name, f := range map[string]func() error{
		"bad shape":   func() error { _, err := NewDataset(ok, []int{0, 1}, Shape{0, 2, 4}, 2); return err },
		"no classes":  func() error { _, err := NewDataset(ok, []int{0, 1}, sh, 0); return err },
		"length":      func() error { _, err := NewDataset(ok[:7], []int{0, 1}, sh, 2); return err },
		"label big":   func() error { _, err := NewDataset(ok, []int{0, 2}, sh, 2); return err },
		"label minus": func() error { _, err := NewDataset(ok, []int{-1, 0}, sh, 2); return err },
		"NaN": func() error {
			x := append([]float32(nil), ok...)
			x[5] = float32(math.NaN())
			_, err := NewDataset(x, []int{0, 1}, sh, 2)
			return err
		},
	} {
		if err := f(); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("%s: error %v, want dpcore.ErrInvalid", name, err)
		}
	}
	d, err := NewDataset(ok, []int{1, 0}, sh, 2)
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 2 || d.Example(1)[0] != 5 {
		t.Fatalf("dataset %+v", d)
	}
}

func TestBatch(t *testing.T) {
	tr, _, err := SyntheticCIFAR(20, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	idx := []int{7, 0, 19, 7}
	s := tr.Shape.Size()
	x := make([]float32, len(idx)*s)
	y := make([]int, len(idx))
	if err := tr.Batch(idx, x, y); err != nil {
		t.Fatal(err)
	}
	for k, i := range idx {
		if y[k] != tr.Y[i] {
			t.Fatalf("label %d = %d, want %d", k, y[k], tr.Y[i])
		}
		for j, v := range tr.Example(i) {
			if x[k*s+j] != v {
				t.Fatalf("batch %d feature %d differs", k, j)
			}
		}
	}
	if a := testing.AllocsPerRun(10, func() { _ = tr.Batch(idx, x, y) }); a != 0 {
		t.Fatalf("Batch allocates %v times", a)
	}
	if err := tr.Batch([]int{20}, x, y); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("index out of range: %v", err)
	}
	if err := tr.Batch(idx, x[:len(x)-1], y); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("short buffer: %v", err)
	}
	sub, err := tr.Subset(idx)
	if err != nil || sub.Len() != 4 || sub.Y[2] != tr.Y[19] {
		t.Fatalf("subset: %v", err)
	}
}

func TestNormalizeTrainTest(t *testing.T) {
	tr, te, err := Synthetic(200, 50, Shape{3, 4, 5}, 4, 1, 9)
	if err != nil {
		t.Fatal(err)
	}
	// Shift and scale the channels so the statistics are not already 0/1.
	for _, d := range []*Dataset{tr, te} {
		for i := 0; i < d.Len(); i++ {
			ex := d.Example(i)
			for k := range ex {
				ch := k / 20
				ex[k] = ex[k]*float32(ch+2) + float32(10*ch)
			}
		}
	}
	orig := append([]float32(nil), te.X...)
	mean, std, err := NormalizeTrainTest(tr, te)
	if err != nil {
		t.Fatal(err)
	}
	m2, s2, _ := tr.ChannelStats()
	for c := range m2 {
		if math.Abs(m2[c]) > 1e-6 || math.Abs(s2[c]-1) > 1e-5 {
			t.Fatalf("channel %d after normalization: mean %v std %v", c, m2[c], s2[c])
		}
		if math.Abs(mean[c]-10*float64(c)) > 1 {
			t.Fatalf("channel %d mean %v, want about %d", c, mean[c], 10*c)
		}
	}
	// The test set uses the training statistics.
	for i, v := range te.X {
		c := (i % 60) / 20
		want := float32((float64(orig[i]) - mean[c]) / std[c])
		if math.Abs(float64(v-want)) > 1e-5 {
			t.Fatalf("test feature %d = %v, want %v", i, v, want)
		}
	}
	if err := tr.Normalize([]float64{0, 0, 0}, []float64{1, 0, 1}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("std 0: %v", err)
	}
}

// reference crop/flip: pad with zeros, cut the window at (pad+dy, pad+dx),
// then mirror.
func refAugment(src []float32, sh Shape, pad, dy, dx int, flip bool) []float32 {
	ph, pw := sh.H+2*pad, sh.W+2*pad
	padded := make([]float32, sh.C*ph*pw)
	for c := 0; c < sh.C; c++ {
		for r := 0; r < sh.H; r++ {
			for q := 0; q < sh.W; q++ {
				padded[(c*ph+r+pad)*pw+q+pad] = src[(c*sh.H+r)*sh.W+q]
			}
		}
	}
	out := make([]float32, sh.Size())
	for c := 0; c < sh.C; c++ {
		for r := 0; r < sh.H; r++ {
			for q := 0; q < sh.W; q++ {
				v := padded[(c*ph+r+pad+dy)*pw+q+pad+dx]
				oq := q
				if flip {
					oq = sh.W - 1 - q
				}
				out[(c*sh.H+r)*sh.W+oq] = v
			}
		}
	}
	return out
}

func TestAugmenter(t *testing.T) {
	sh := Shape{2, 6, 7}
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, sh.Size())
	for i := range src {
		src[i] = float32(rng.NormFloat64())
	}
	a := Augmenter{Seed: 42, Pad: 2, Flip: true}
	dst := make([]float32, sh.Size())
	type draw struct {
		dy, dx int
		flip   bool
	}
	seen := map[draw]int{}
	const trials = 4500
	for i := 0; i < trials; i++ {
		step := uint64(i / 50)
		dy, dx, flip := a.Draw(step, i%50)
		seen[draw{dy, dx, flip}]++
		if err := a.Apply(dst, src, sh, step, i%50); err != nil {
			t.Fatal(err)
		}
		want := refAugment(src, sh, a.Pad, dy, dx, flip)
		for k := range want {
			if dst[k] != want[k] {
				t.Fatalf("draw (%d,%d,%v): feature %d = %v, want %v", dy, dx, flip, k, dst[k], want[k])
			}
		}
	}
	// 5 x 5 shifts x 2 flips = 50 outcomes, 90 expected each. A chi-square
	// with 49 degrees of freedom exceeds 95 with probability < 1e-4.
	if len(seen) != 50 {
		t.Fatalf("%d distinct draws, want 50", len(seen))
	}
	chi := 0.0
	for _, c := range seen {
		e := float64(trials) / 50
		chi += (float64(c) - e) * (float64(c) - e) / e
	}
	if chi > 95 {
		t.Fatalf("draws not uniform: chi-square %v over 49 d.o.f.", chi)
	}
	// Deterministic in (seed, step, index) and sensitive to each.
	d1, d2, f1 := a.Draw(7, 3)
	for range 3 {
		if e1, e2, g1 := a.Draw(7, 3); e1 != d1 || e2 != d2 || g1 != f1 {
			t.Fatal("same (seed, step, index) gave different draws")
		}
	}
	differ := 0
	for i := 0; i < 100; i++ {
		x1, y1, z1 := a.Draw(uint64(i), 1)
		x2, y2, z2 := Augmenter{Seed: 43, Pad: 2, Flip: true}.Draw(uint64(i), 1)
		if x1 != x2 || y1 != y2 || z1 != z2 {
			differ++
		}
	}
	if differ < 80 {
		t.Fatalf("seed 42 and 43 agree on %d of 100 draws", 100-differ)
	}
	// The zero Augmenter is the identity.
	if err := (Augmenter{}).Apply(dst, src, sh, 5, 5); err != nil {
		t.Fatal(err)
	}
	for k := range src {
		if dst[k] != src[k] {
			t.Fatal("zero Augmenter changed the example")
		}
	}
	if err := (Augmenter{Pad: 6}).Apply(dst, src, sh, 0, 0); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("pad >= height: %v", err)
	}
}

func TestAugmentBatchResume(t *testing.T) {
	tr, _, _ := SyntheticCIFAR(64, 0, 3)
	a := Augmenter{Seed: 9, Pad: 4, Flip: true}
	s := tr.Shape.Size()
	idx := []int{5, 9, 33, 63}
	x1, x2 := make([]float32, len(idx)*s), make([]float32, len(idx)*s)
	y := make([]int, len(idx))
	if err := a.Batch(tr, idx, 11, x1, y); err != nil {
		t.Fatal(err)
	}
	// A fresh Augmenter (as after a restart) at the same step, with the
	// indices in another order, gives the same examples.
	b := Augmenter{Seed: 9, Pad: 4, Flip: true}
	rev := []int{63, 33, 9, 5}
	if err := b.Batch(tr, rev, 11, x2, y); err != nil {
		t.Fatal(err)
	}
	for k := range idx {
		got, want := x2[(3-k)*s:(4-k)*s], x1[k*s:(k+1)*s]
		for j := range got {
			if got[j] != want[j] {
				t.Fatalf("example %d differs after restart", idx[k])
			}
		}
	}
	if n := testing.AllocsPerRun(5, func() { _ = a.Batch(tr, idx, 1, x1, y) }); n != 0 {
		t.Fatalf("augmented Batch allocates %v times", n)
	}
}

func TestSyntheticIsLearnable(t *testing.T) {
	tr, te, err := SyntheticCIFAR(1000, 500, 1)
	if err != nil {
		t.Fatal(err)
	}
	for c, k := range tr.ClassCounts() {
		if k != 100 {
			t.Fatalf("class %d has %d training examples, want 100", c, k)
		}
	}
	// Nearest class mean (fit on train) must classify test examples far
	// above chance (10%).
	s := tr.Shape.Size()
	means := make([][]float64, 10)
	for c := range means {
		means[c] = make([]float64, s)
	}
	for i := 0; i < tr.Len(); i++ {
		for k, v := range tr.Example(i) {
			means[tr.Y[i]][k] += float64(v) / 100
		}
	}
	correct := 0
	for i := 0; i < te.Len(); i++ {
		best, bestD := -1, math.Inf(1)
		for c := range means {
			d := 0.0
			for k, v := range te.Example(i) {
				e := float64(v) - means[c][k]
				d += e * e
			}
			if d < bestD {
				best, bestD = c, d
			}
		}
		if best == te.Y[i] {
			correct++
		}
	}
	if acc := float64(correct) / float64(te.Len()); acc < 0.9 {
		t.Fatalf("nearest-mean accuracy %v, want >= 0.9", acc)
	}
	// Same seed, same data.
	tr2, _, _ := SyntheticCIFAR(1000, 0, 1)
	for i := range tr.X {
		if tr.X[i] != tr2.X[i] {
			t.Fatal("synthetic data not determined by the seed")
		}
	}
}

func TestRealFashionMNIST(t *testing.T) {
	if _, err := os.Stat(DefaultFashionMNISTDir); err != nil {
		t.Skipf("Fashion-MNIST not installed at %s (Debian package dataset-fashion-mnist): %v", DefaultFashionMNISTDir, err)
	}
	train, test, err := LoadDir(DefaultFashionMNISTDir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 || train.Shape != (Shape{1, 28, 28}) || train.Classes != 10 {
		t.Fatalf("train %d, test %d, shape %v, %d classes", train.Len(), test.Len(), train.Shape, train.Classes)
	}
	for c := 0; c < 10; c++ {
		if train.ClassCounts()[c] != 6000 || test.ClassCounts()[c] != 1000 {
			t.Fatalf("class %d: %d train, %d test, want 6000 and 1000", c, train.ClassCounts()[c], test.ClassCounts()[c])
		}
	}
	// The published normalization constants of the training set (as used by
	// torchvision examples): mean 0.2860, std 0.3530.
	m, s, _ := train.ChannelStats()
	if math.Abs(m[0]-0.2860) > 5e-4 || math.Abs(s[0]-0.3530) > 5e-4 {
		t.Fatalf("train pixel mean %v std %v, want 0.2860 and 0.3530", m[0], s[0])
	}

	// The embedded subset is the first 600 (100) examples of each class in
	// file order.
	etr, ete, err := LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		emb, full *Dataset
		per       int
	}{{etr, train, EmbeddedTrainPerClass}, {ete, test, EmbeddedTestPerClass}} {
		cnt := make([]int, 10)
		k := 0
		for i := 0; i < p.full.Len() && k < p.emb.Len(); i++ {
			l := p.full.Y[i]
			if cnt[l] == p.per {
				continue
			}
			cnt[l]++
			if p.emb.Y[k] != l {
				t.Fatalf("%s example %d: label %d, want %d", p.emb.Name, k, p.emb.Y[k], l)
			}
			a, b := p.emb.Example(k), p.full.Example(i)
			for j := range a {
				if a[j] != b[j] {
					t.Fatalf("%s example %d differs from full example %d", p.emb.Name, k, i)
				}
			}
			k++
		}
		if k != p.emb.Len() || k != 10*p.per {
			t.Fatalf("%s: matched %d of %d examples", p.emb.Name, k, p.emb.Len())
		}
	}
}

func TestEmbeddedFashionMNIST(t *testing.T) {
	train, test, err := LoadEmbeddedFashionMNIST()
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 6000 || test.Len() != 1000 || train.Shape != (Shape{1, 28, 28}) || test.Classes != 10 {
		t.Fatalf("embedded: train %d, test %d, shape %v", train.Len(), test.Len(), train.Shape)
	}
	for c := 0; c < 10; c++ {
		if train.ClassCounts()[c] != 600 || test.ClassCounts()[c] != 100 {
			t.Fatalf("class %d: %d train, %d test", c, train.ClassCounts()[c], test.ClassCounts()[c])
		}
	}
}

// Slice is a view: it copies nothing, shares every slice with its parent,
// and a view of a view names the first Dataset as its parent.
func TestSliceIsAView(t *testing.T) {
	x := make([]float32, 5*2)
	for i := range x {
		x[i] = float32(i)
	}
	d, err := NewDataset(x, []int{0, 1, 0, 1, 0}, Shape{C: 1, H: 1, W: 2}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetOwners([]int64{10, 11, 12, 13, 14}); err != nil {
		t.Fatal(err)
	}
	v, err := d.Slice(1, 4)
	if err != nil {
		t.Fatal(err)
	}
	if v.Len() != 3 || v.X[0] != 2 || v.Y[0] != 1 || v.Owners[2] != 13 {
		t.Fatalf("view holds x %v y %v owners %v", v.X, v.Y, v.Owners)
	}
	if &v.X[0] != &d.X[2] || &v.Y[0] != &d.Y[1] || &v.Owners[0] != &d.Owners[1] {
		t.Fatal("Slice copied the examples")
	}
	w, err := v.Slice(1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if p, lo := w.Parent(); p != d || lo != 2 {
		t.Fatalf("view of a view: parent %p at %d, want %p at 2", p, lo, d)
	}
	if p, lo := d.Parent(); p != d || lo != 0 {
		t.Fatalf("a Dataset that is no view: parent %p at %d", p, lo)
	}
	// A view cannot reach past its end (capacity is cut).
	if cap(v.X) != len(v.X) || cap(v.Y) != len(v.Y) {
		t.Fatal("view's slices reach past its end")
	}
	for _, r := range [][2]int{{-1, 2}, {3, 2}, {0, 6}} {
		if _, err := d.Slice(r[0], r[1]); err == nil {
			t.Errorf("Slice(%d, %d) of 5 examples accepted", r[0], r[1])
		}
	}
}
