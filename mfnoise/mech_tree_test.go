package mfnoise

import (
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/linalg"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

// denseTree builds the tree encoder by the recursive definition of
// Denisov et al. App. C (C^(1) = [1]; two block-diagonal copies plus a row of
// ones), then drops the columns of padded steps.
func denseTree(n int) *mat.Dense {
	c := mat.NewDense(1, 1, []float64{1})
	for {
		_, N := c.Dims()
		if N >= n {
			break
		}
		m, _ := c.Dims()
		next := mat.NewDense(2*m+1, 2*N, nil)
		for i := 0; i < m; i++ {
			for j := 0; j < N; j++ {
				next.Set(i, j, c.At(i, j))
				next.Set(m+i, N+j, c.At(i, j))
			}
		}
		for j := 0; j < 2*N; j++ {
			next.Set(2*m, j, 1)
		}
		c = next
	}
	m, _ := c.Dims()
	return mat.DenseCopyOf(c.Slice(0, m, 0, n))
}

func TestTreeEncoderMatchesRecursiveDefinition(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 13, 16} {
		w, _ := dpcore.PrefixSum(n)
		f, x, err := binaryTree(w, TreeOptions{Decoder: TreeFull})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		want := denseTree(n)
		if !mat.Equal(f.Encoder, want) {
			t.Fatalf("n=%d: encoder\n%v\nwant\n%v", n, mat.Formatted(f.Encoder), mat.Formatted(want))
		}
		if g := linalg.Gram(want); !mat.Equal(x, g) {
			t.Fatalf("n=%d: structured Gram differs from C^T C", n)
		}
	}
}

func TestTreeFullDecoderIsPseudoinverse(t *testing.T) {
	mom, _ := dpcore.MomentumWorkload(11, 0.9, dpcore.CooldownSchedule(11, 0.25, 0.05))
	for _, w := range []dpcore.Workload{{Kind: dpcore.PrefixSumKind, N: 1}, {Kind: dpcore.PrefixSumKind, N: 6}, {Kind: dpcore.PrefixSumKind, N: 8}, {Kind: dpcore.PrefixSumKind, N: 13}, mom} {
		f, err := BinaryTree(w, TreeOptions{Decoder: TreeFull})
		if err != nil {
			t.Fatalf("%v: %v", w, err)
		}
		a, _ := w.Matrix()
		want, err := OptimalDecoder(a, f.Encoder)
		if err != nil {
			t.Fatal(err)
		}
		if !mat.EqualApprox(f.Decoder, want, 1e-10) {
			t.Fatalf("%v: tree full decoder differs from A C^+", w)
		}
	}
}

// honakerBelow is the recursive estimator from below applied to a noise
// vector z on the complete tree of N leaves: leaf estimate z, node estimate
// the inverse-variance mix of its own z and the sum of its children's
// estimates. Returned per node (level, position) with its variance.
func honakerBelow(layout *treeLayout, z []float64) [][]float64 {
	L := layout.levels
	est := make([][]float64, L+1)
	vr := make([][]float64, L+1)
	for h := 0; h <= L; h++ {
		est[h] = make([]float64, 1<<(L-h))
		vr[h] = make([]float64, 1<<(L-h))
		for p := range est[h] {
			own := z[layout.row[h][p]]
			if h == 0 {
				est[h][p], vr[h][p] = own, 1
				continue
			}
			cs := est[h-1][2*p] + est[h-1][2*p+1]
			cv := vr[h-1][2*p] + vr[h-1][2*p+1]
			v := 1 / (1 + 1/cv)
			est[h][p], vr[h][p] = v*(own+cs/cv), v
		}
	}
	return est
}

func TestTreeOnlineDecoderMatchesRecursiveEstimator(t *testing.T) {
	for _, n := range []int{1, 5, 8, 12} {
		w, _ := dpcore.PrefixSum(n)
		f, err := BinaryTree(w, TreeOptions{Decoder: TreeOnline})
		if err != nil {
			t.Fatal(err)
		}
		layout := newTreeLayout(n)
		m := layout.nodes()
		// Column r of B is the decoder's answer to the unit noise e_r.
		for r := 0; r < m; r++ {
			z := make([]float64, m)
			z[r] = 1
			est := honakerBelow(layout, z)
			for i := 1; i <= n; i++ {
				want, start := 0.0, 0
				for h := layout.levels; h >= 0; h-- {
					if i&(1<<h) != 0 {
						want += est[h][start>>h]
						start += 1 << h
					}
				}
				if got := f.Decoder.At(i-1, r); math.Abs(got-want) > 1e-13 {
					t.Fatalf("n=%d B[%d,%d] = %v, recursive estimator gives %v", n, i-1, r, got, want)
				}
			}
		}
	}
}

func TestTreeSensitivityHandChecked(t *testing.T) {
	// 4 leaves: each leaf is covered by itself, its parent and the root.
	w, _ := dpcore.PrefixSum(4)
	f, err := BinaryTree(w, TreeOptions{Decoder: TreeFull})
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.Sensitivity(dpcore.SingleParticipation())
	if err != nil || math.Abs(r.Value-math.Sqrt(3)) > 1e-12 || !r.Exact {
		t.Fatalf("single-participation sens = %+v %v, want sqrt(3)", r, err)
	}
	// (k=2,b=2): pattern {0,2}: X_00 + X_22 + 2 X_02 = 3 + 3 + 2*1 = 8;
	// {1,3} likewise 8.
	schema, _ := dpcore.KBParticipation(2, 2)
	r, _ = f.Sensitivity(schema)
	if math.Abs(r.Value-math.Sqrt(8)) > 1e-12 || r.Method != sensitivity.NonnegativeGram {
		t.Fatalf("(2,2) sens = %+v, want sqrt(8)", r)
	}
	// n = 6 under (k=3,b=2): 8 leaves, L = 3, X_ij = 4 - bitlen(i^j).
	// {0,2,4}: 3*4 + 2*(X02 + X04 + X24) = 12 + 2*(2+1+1) = 20;
	// {1,3,5}: 12 + 2*(X13 + X15 + X35) = 12 + 2*(2+1+1) = 20.
	w6, _ := dpcore.PrefixSum(6)
	f6, _ := BinaryTree(w6, TreeOptions{Decoder: TreeFull})
	s32, _ := dpcore.KBParticipation(3, 2)
	r, _ = f6.Sensitivity(s32)
	if math.Abs(r.Value-math.Sqrt(20)) > 1e-12 || !r.Exact {
		t.Fatalf("(3,2) sens of 6-step tree = %+v, want sqrt(20)", r)
	}
}

// Rows are in post-order: children before parents, and rows sorted by the
// step at which their node completes.
func TestTreeRowOrderIsCompletionOrder(t *testing.T) {
	const n = 13
	layout := newTreeLayout(n)
	last := -1
	for r := 0; r < layout.nodes(); r++ {
		done := layout.start[r] + 1<<layout.level[r] - 1
		if done < last {
			t.Fatalf("row %d completes at step %d, before row %d's step %d", r, done, r-1, last)
		}
		last = done
		h, p := layout.level[r], layout.start[r]>>layout.level[r]
		got, err := TreeRow(n, h, p)
		if err != nil || got != r {
			t.Fatalf("TreeRow(%d,%d,%d) = %d, %v; want %d", n, h, p, got, err, r)
		}
		if h > 0 && (layout.row[h-1][2*p] >= r || layout.row[h-1][2*p+1] >= r) {
			t.Fatalf("node row %d precedes a child", r)
		}
	}
	if _, err := TreeRow(n, 5, 0); err == nil {
		t.Fatal("level above the root accepted")
	}
	if _, err := TreeRow(0, 0, 0); err == nil {
		t.Fatal("n = 0 accepted")
	}
}

// A non-prefix workload is served by post-processing the online prefix
// decoder: B = A S^-1 B_S.
func TestTreeOnlineMomentumIsPostProcessed(t *testing.T) {
	const n = 10
	mom, _ := dpcore.MomentumWorkload(n, 0.9, dpcore.CooldownSchedule(n, 0.3, 0.05))
	pre, _ := dpcore.PrefixSum(n)
	opt := TreeOptions{Decoder: TreeOnline, Completion: true, ZeroVirtual: true}
	fm, err := BinaryTree(mom, opt)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := BinaryTree(pre, opt)
	a, _ := mom.Matrix()
	s, _ := pre.Matrix()
	var sInv, want mat.Dense
	if err := sInv.Inverse(s); err != nil {
		t.Fatal(err)
	}
	want.Product(a, &sInv, fs.Decoder)
	if !mat.EqualApprox(fm.Decoder, &want, 1e-12) {
		t.Fatal("momentum tree decoder is not A S^-1 B_S")
	}
	// Completion changes only the last row, and never raises its norm.
	plain, _ := BinaryTree(pre, TreeOptions{Decoder: TreeOnline})
	for i := 0; i < n; i++ {
		a, b := fs.Decoder.RawRowView(i), plain.Decoder.RawRowView(i)
		if i < n-1 && !floatsEqual(a, b) {
			t.Fatalf("completion changed row %d", i)
		}
		if i == n-1 && (dot(a, a) >= dot(b, b) || floatsEqual(a, b)) {
			t.Fatalf("completed last row norm %v, plain %v", dot(a, a), dot(b, b))
		}
	}
}

func floatsEqual(a, b []float64) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTreeZeroVirtualColumns(t *testing.T) {
	const n = 10 // 16 leaves: nodes starting at step >= 10 cover only padding
	w, _ := dpcore.PrefixSum(n)
	zero, _ := BinaryTree(w, TreeOptions{Decoder: TreeOnline, Completion: true, ZeroVirtual: true})
	kept, _ := BinaryTree(w, TreeOptions{Decoder: TreeOnline, Completion: true})
	layout := newTreeLayout(n)
	virtualWeight := 0.0
	for r := 0; r < layout.nodes(); r++ {
		if layout.start[r] < n {
			continue
		}
		for i := 0; i < n; i++ {
			if zero.Decoder.At(i, r) != 0 {
				t.Fatalf("virtual node row %d has decoder weight %v at step %d", r, zero.Decoder.At(i, r), i)
			}
		}
		virtualWeight += math.Abs(kept.Decoder.At(n-1, r))
	}
	if virtualWeight == 0 {
		t.Fatal("completion without ZeroVirtual put no weight on virtual nodes: test is vacuous")
	}
	a, b := zero.Decoder.RawRowView(n-1), kept.Decoder.RawRowView(n-1)
	if dot(a, a) >= dot(b, b) {
		t.Fatalf("zeroing virtual nodes did not lower the last row's norm: %v vs %v", dot(a, a), dot(b, b))
	}
}
