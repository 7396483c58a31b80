package mfnoise

import (
	"errors"
	"math"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/sensitivity"
	"gonum.org/v1/gonum/mat"
)

func TestKBPatternsAndSensitivityOfIdentity(t *testing.T) {
	schema, err := dpcore.KBParticipation(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	p := schema.Patterns(6)
	if len(p) != 2 || p[0][0] != 0 || p[0][1] != 2 || p[0][2] != 4 || p[1][2] != 5 {
		t.Fatalf("patterns %v, want {1,3,5},{2,4,6} (1-based)", p)
	}
	eye := mat.NewDiagDense(6, []float64{1, 1, 1, 1, 1, 1})
	r, err := sensitivity.Of(eye, schema)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Exact || math.Abs(r.Value-math.Sqrt(3)) > 1e-12 || r.Method != sensitivity.NonnegativeGram {
		t.Fatalf("identity sensitivity under (3,2) = %+v, want exact sqrt(3)", r)
	}
	// Prefix-sum encoder S: X = S^T S has X_ij = n - max(i,j); pattern
	// {1,3,5} (0-based 0,2,4) sums to 6+4+2 + 2*(4+2+2) = 28, {2,4,6} to
	// 5+3+1 + 2*(3+1+1) = 19.
	sm, _ := dpcore.PrefixSum(6)
	a, _ := sm.Matrix()
	r, _ = sensitivity.Of(a, schema)
	if math.Abs(r.Value-math.Sqrt(28)) > 1e-12 {
		t.Fatalf("sens(S) = %v, want sqrt(28)", r.Value)
	}
	if _, err := dpcore.KBParticipation(2, 2); err != nil {
		t.Fatal(err)
	}
	bad, _ := dpcore.KBParticipation(2, 2)
	if _, err := sensitivity.Of(eye, bad); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("k*b < n accepted: %v", err)
	}
}

func TestMinSepDPOnBandedEncoderIsExact(t *testing.T) {
	// A lower-triangular 2-banded C with column norms 1 under min-sep
	// (k=3, b=2): sens = sqrt(3) exactly (banded-MF Thm 2).
	n := 7
	c := mat.NewDense(n, n, nil)
	for i := 0; i < n; i++ {
		if i == 0 {
			c.Set(0, 0, 1)
			continue
		}
		c.Set(i, i, 0.8)
		c.Set(i, i-1, 0.6)
	}
	// Column norms: col j<n-1 has 0.8^2 + 0.6^2 = 1 except col 0: 1 + 0.36.
	schema, _ := dpcore.MinSepParticipation(3, 2)
	r, err := sensitivity.Of(c, schema)
	if err != nil {
		t.Fatal(err)
	}
	// Best pattern takes column 0 (norm^2 1.36), then two more columns of
	// norm^2 1 (or 0.64 for the last).
	want := math.Sqrt(1.36 + 1 + 1)
	if !r.Exact || math.Abs(r.Value-want) > 1e-12 {
		t.Fatalf("min-sep sens = %+v, want exact %v", r, want)
	}
}

func TestNewFactorizationRefusesWrongProduct(t *testing.T) {
	w, _ := dpcore.PrefixSum(4)
	a, _ := w.Matrix()
	eye := mat.NewDense(4, 4, []float64{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1})
	if _, err := NewFactorization(w, eye, a, Metadata{Kind: "dpsgd"}); err != nil {
		t.Fatalf("A = A I refused: %v", err)
	}
	bad := mat.DenseCopyOf(a)
	bad.Set(3, 0, 1+1e-6)
	if _, err := NewFactorization(w, eye, bad, Metadata{}); err == nil {
		t.Fatal("wrong factorization accepted")
	}
	b, err := OptimalDecoder(a, eye)
	if err != nil || !mat.EqualApprox(b, a, 1e-12) {
		t.Fatalf("optimal decoder of identity encoder: %v %v", err, b)
	}
}
