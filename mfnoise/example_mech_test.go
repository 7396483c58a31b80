package mfnoise_test

import (
	"context"
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
)

// The binary tree over 4 steps: 7 nodes in post-order (leaves 1, 2, their
// parent, leaves 3, 4, their parent, the root). Each step is covered by 3
// nodes, so its single-participation sensitivity is sqrt(3).
func ExampleBinaryTree() {
	w, err := dpcore.PrefixSum(4)
	if err != nil {
		log.Fatal(err)
	}
	f, err := mfnoise.BinaryTree(w, mfnoise.TreeOptions{Decoder: mfnoise.TreeOnline})
	if err != nil {
		log.Fatal(err)
	}
	m, n := f.Encoder.Dims()
	fmt.Printf("encoder %d x %d\n", m, n)
	for i := 0; i < m; i++ {
		fmt.Println(f.Encoder.RawRowView(i))
	}
	sens, _ := f.Sensitivity(dpcore.SingleParticipation())
	loss, _ := f.Loss(dpcore.SingleParticipation())
	fmt.Printf("sensitivity %.4f (exact %v), loss %.4f\n", sens.Value, sens.Exact, loss)
	// Output:
	// encoder 7 x 4
	// [1 0 0 0]
	// [0 1 0 0]
	// [1 1 0 0]
	// [0 0 1 0]
	// [0 0 0 1]
	// [0 0 1 1]
	// [1 1 1 1]
	// sensitivity 1.7321 (exact true), loss 11.7143
}

// Ranking closed-form mechanisms for 64 steps of SGD under
// (k,b) = (4,16)-participation (4 epochs of 16 batches).
func ExampleCompare() {
	w, err := dpcore.PrefixSum(64)
	if err != nil {
		log.Fatal(err)
	}
	schema, err := dpcore.KBParticipation(4, 16)
	if err != nil {
		log.Fatal(err)
	}
	// Typed values; command lines parse names with privacy.ParseMechanisms.
	mechs := []mfnoise.Mechanism{
		mfnoise.DPSGD{},
		mfnoise.Tree{Decoder: mfnoise.TreeOnline},
		mfnoise.Tree{Decoder: mfnoise.TreeFull},
		mfnoise.FFT{Decoder: mfnoise.FFTAlgorithm1},
		mfnoise.FFT{Decoder: mfnoise.FFTOptimal},
		mfnoise.Stamped{Inner: mfnoise.Tree{Decoder: mfnoise.TreeFull}, Stamps: 4},
	}
	rows, err := mfnoise.Compare(context.Background(), w, schema, mechs, mfnoise.BuildOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range rows {
		fmt.Printf("%-13s loss %8.1f  rmse %5.2f  sens %5.3f %-17s memory %3.0f  %s\n",
			r.Mechanism, r.Loss, r.RMSE, r.Sensitivity, r.SensitivityMethod, r.NoiseMemoryPerCoord, r.StepTime)
	}
	// Output:
	// tree-full/s4  loss   1952.6  rmse  5.52  sens 4.472 nonnegative-gram  memory  31  O(n d)
	// fft-opt       loss   2196.8  rmse  5.86  sens 4.043 nonnegative-gram  memory 128  O(d log^2 n)
	// fft           loss   2410.9  rmse  6.14  sens 4.043 nonnegative-gram  memory 128  O(d log n)
	// tree-full     loss   2550.2  rmse  6.31  sens 6.633 nonnegative-gram  memory 127  O(n d)
	// tree-online   loss   5366.2  rmse  9.16  sens 6.633 nonnegative-gram  memory   7  O(d log n)
	// dpsgd         loss   8320.0  rmse 11.40  sens 2.000 toeplitz-packed   memory   1  O(d)
}

// Stamping: five copies of a 4-step full tree serve 20 steps; the encoder
// is block diagonal and the decoder is the optimal one for it.
func ExampleStamp() {
	w, err := dpcore.PrefixSum(20)
	if err != nil {
		log.Fatal(err)
	}
	tree := func(w dpcore.Workload) (*mfnoise.Factorization, error) {
		return mfnoise.BinaryTree(w, mfnoise.TreeOptions{Decoder: mfnoise.TreeFull})
	}
	f, err := mfnoise.Stamp(w, 5, tree, mfnoise.StampOptimal)
	if err != nil {
		log.Fatal(err)
	}
	m, n := f.Encoder.Dims()
	schema, _ := dpcore.KBParticipation(4, 5)
	sens, _ := f.Sensitivity(schema)
	fmt.Printf("encoder %d x %d, stamps %d, sensitivity under (4,5): %.4f (%s)\n", m, n, f.Meta.Stamps, sens.Value, sens.Method)
	// Output:
	// encoder 35 x 20, stamps 5, sensitivity under (4,5): 3.4641 (nonnegative-gram)
}
