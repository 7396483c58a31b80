package mfnoise

import (
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/gonum/mat"
)

func treeBuilder(opt TreeOptions) func(dpcore.Workload) (*Factorization, error) {
	return func(w dpcore.Workload) (*Factorization, error) { return BinaryTree(w, opt) }
}

func TestStampEncoderAndOptimalDecoder(t *testing.T) {
	mom, _ := dpcore.MomentumWorkload(12, 0.9, dpcore.CooldownSchedule(12, 0.25, 0.05))
	pre, _ := dpcore.PrefixSum(12)
	for _, w := range []dpcore.Workload{pre, mom} {
		for _, inner := range []func(dpcore.Workload) (*Factorization, error){
			treeBuilder(TreeOptions{Decoder: TreeFull}),
			func(w dpcore.Workload) (*Factorization, error) { return DenseFFT(w, FFTOptimal) },
		} {
			f, err := Stamp(w, 3, inner, StampOptimal)
			if err != nil {
				t.Fatalf("%v: %v", w, err)
			}
			f0, _ := inner(dpcore.Workload{Kind: dpcore.PrefixSumKind, N: 4})
			var kron mat.Dense
			kron.Kronecker(mat.NewDiagDense(3, []float64{1, 1, 1}), f0.Encoder)
			if !mat.Equal(f.Encoder, &kron) {
				t.Fatalf("%v: stamped encoder is not I_3 (x) C", w)
			}
			a, _ := w.Matrix()
			want, err := OptimalDecoder(a, &kron)
			if err != nil {
				t.Fatal(err)
			}
			if !mat.EqualApprox(f.Decoder, want, 1e-10) {
				t.Fatalf("%v: stamped optimal decoder differs from A (I (x) C)^+", w)
			}
		}
	}
}

// SPEC 5.2: for the prefix sum the restarted decoder coincides with the
// optimal one when the block decoder is S C^+ (the full tree decoder).
func TestStampRestartedOverFullTreeIsOptimal(t *testing.T) {
	w, _ := dpcore.PrefixSum(15)
	full := treeBuilder(TreeOptions{Decoder: TreeFull})
	r, err := Stamp(w, 3, full, StampRestartedOnline)
	if err != nil {
		t.Fatal(err)
	}
	o, err := Stamp(w, 3, full, StampOptimal)
	if err != nil {
		t.Fatal(err)
	}
	if !mat.EqualApprox(r.Decoder, o.Decoder, 1e-12) {
		t.Fatal("restarted full-tree decoder differs from the stamped optimal decoder")
	}
}

// The restarted online decoder against a direct simulation: each block of 4
// steps runs its own tree; the estimate of prefix i adds the root estimates
// from below of the finished blocks and the dyadic estimates inside the
// current block.
func TestStampRestartedOnlineMatchesRestartedTrees(t *testing.T) {
	const n0, s = 4, 3
	w, _ := dpcore.PrefixSum(n0 * s)
	f, err := Stamp(w, s, treeBuilder(TreeOptions{Decoder: TreeOnline}), StampRestartedOnline)
	if err != nil {
		t.Fatal(err)
	}
	layout := newTreeLayout(n0)
	m0 := layout.nodes()
	for col := 0; col < s*m0; col++ {
		blocks := make([][][]float64, s)
		for u := 0; u < s; u++ {
			z := make([]float64, m0)
			if col/m0 == u {
				z[col%m0] = 1
			}
			blocks[u] = honakerBelow(layout, z)
		}
		for i := 1; i <= n0*s; i++ {
			u, within := (i-1)/n0, (i-1)%n0+1
			want := 0.0
			for v := 0; v < u; v++ {
				want += blocks[v][layout.levels][0]
			}
			start := 0
			for h := layout.levels; h >= 0; h-- {
				if within&(1<<h) != 0 {
					want += blocks[u][h][start>>h]
					start += 1 << h
				}
			}
			if got := f.Decoder.At(i-1, col); math.Abs(got-want) > 1e-13 {
				t.Fatalf("B[%d,%d] = %v, restarted trees give %v", i-1, col, got, want)
			}
		}
	}
}

func TestStampRejectsBadInput(t *testing.T) {
	w, _ := dpcore.PrefixSum(10)
	full := treeBuilder(TreeOptions{Decoder: TreeFull})
	for _, s := range []int{0, -1, 3, 4} {
		if _, err := Stamp(w, s, full, StampOptimal); !errors.Is(err, dpcore.ErrInvalid) {
			t.Fatalf("%d stamps of 10 steps: err = %v, want dpcore.ErrInvalid", s, err)
		}
	}
	if _, err := Stamp(w, 2, full, StampDecoder(7)); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("unknown decoder: %v", err)
	}
	// A block mechanism that returns the wrong size is refused.
	wrong := func(dpcore.Workload) (*Factorization, error) {
		return DenseDPSGD(dpcore.Workload{Kind: dpcore.PrefixSumKind, N: 3})
	}
	if _, err := Stamp(w, 2, wrong, StampOptimal); err == nil {
		t.Fatal("block of the wrong size accepted")
	}
}

func TestStampRestartedMomentumIsPostProcessed(t *testing.T) {
	mom, _ := dpcore.MomentumWorkload(12, 0.9, dpcore.CooldownSchedule(12, 0.25, 0.05))
	pre, _ := dpcore.PrefixSum(12)
	online := treeBuilder(TreeOptions{Decoder: TreeOnline, Completion: true, ZeroVirtual: true})
	fm, err := Stamp(mom, 4, online, StampRestartedOnline)
	if err != nil {
		t.Fatal(err)
	}
	fs, _ := Stamp(pre, 4, online, StampRestartedOnline)
	a, _ := mom.Matrix()
	s, _ := pre.Matrix()
	var sInv, want mat.Dense
	if err := sInv.Inverse(s); err != nil {
		t.Fatal(err)
	}
	want.Product(a, &sInv, fs.Decoder)
	if !mat.EqualApprox(fm.Decoder, &want, 1e-12) || fm.Meta.Stamps != 4 || fm.Meta.Decoder != "restarted-online+completion+zero-virtual" {
		t.Fatalf("momentum restarted decoder is not A S^-1 B_S (meta %+v)", fm.Meta)
	}
}
