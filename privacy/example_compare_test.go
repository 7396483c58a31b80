package privacy_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"gonum.org/v1/gonum/mat"
)

// mfnoise.Compare scores a caller's own factorization next to the built-in
// mechanisms. Here the caller's is output perturbation, C = A and B = I:
// the noise is added to the prefix sums themselves. Under single
// participation its sensitivity is A's largest column norm, sqrt(16) = 4,
// so its loss is 16 * ||I||_F^2 = 256, worse than DP-SGD's n(n+1)/2 = 136.
func ExampleCustomFactorization() {
	const n = 16
	w, err := dpcore.PrefixSum(n)
	if err != nil {
		log.Fatal(err)
	}
	a, err := w.Matrix()
	if err != nil {
		log.Fatal(err)
	}
	id := mat.NewDiagDense(n, nil)
	for i := 0; i < n; i++ {
		id.SetDiag(i, 1)
	}
	b := mat.DenseCopyOf(id)
	f, err := mfnoise.NewFactorization(w, a, b, mfnoise.Metadata{Kind: "output-perturbation"})
	if err != nil {
		log.Fatal(err)
	}
	mechs := []mfnoise.Mechanism{
		privacy.CustomFactorization{Name: "output-perturbation", F: f},
		mfnoise.DPSGD{},
		mfnoise.Tree{Decoder: mfnoise.TreeFull},
		mfnoise.MFSingle{},
	}
	rows, err := mfnoise.Compare(context.Background(), w, dpcore.SingleParticipation(), mechs, mfnoise.BuildOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		fmt.Printf("%-19s sensitivity %.3f  loss %6.1f\n", r.Mechanism, r.Sensitivity, r.Loss)
	}
	// Output:
	// mf-single           sensitivity 1.000  loss   45.7
	// tree-full           sensitivity 2.236  loss   60.1
	// dpsgd               sensitivity 1.000  loss  136.0
	// output-perturbation sensitivity 4.000  loss  256.0
}
