package data

import (
	"crypto/sha256"
	"os"
	"testing"
)

func BenchmarkLoadFashionMNIST(b *testing.B) {
	if _, err := os.Stat(DefaultFashionMNISTDir); err != nil {
		b.Skipf("Fashion-MNIST not installed: %v", err)
	}
	for b.Loop() {
		if _, _, err := LoadFashionMNIST(DefaultFashionMNISTDir); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadEmbeddedFashionMNIST(b *testing.B) {
	for b.Loop() {
		if _, _, err := LoadEmbeddedFashionMNIST(); err != nil {
			b.Fatal(err)
		}
	}
}

func benchBatchSetup(b *testing.B) (*Dataset, []int, []float32, []int) {
	tr, _, err := SyntheticCIFAR(4096, 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	idx := make([]int, 256)
	for i := range idx {
		idx[i] = (i * 37) % tr.Len()
	}
	return tr, idx, make([]float32, len(idx)*tr.Shape.Size()), make([]int, len(idx))
}

// A batch of 256 CIFAR examples.
func BenchmarkBatch256(b *testing.B) {
	tr, idx, x, y := benchBatchSetup(b)
	b.SetBytes(int64(len(x) * 4))
	for b.Loop() {
		if err := tr.Batch(idx, x, y); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAugmentBatch256(b *testing.B) {
	tr, idx, x, y := benchBatchSetup(b)
	a := Augmenter{Seed: 1, Pad: 4, Flip: true}
	b.SetBytes(int64(len(x) * 4))
	step := uint64(0)
	for b.Loop() {
		step++
		if err := a.Batch(tr, idx, step, x, y); err != nil {
			b.Fatal(err)
		}
	}
}

// The digest of an MNIST-sized training set (60,000 images of 28 x 28),
// which a run with a checkpoint computes once at start (issue 36 item 4).
func BenchmarkHashExamplesMNIST(b *testing.B) {
	d := &Dataset{X: make([]float32, 60000*784), Y: make([]int, 60000), Shape: Shape{C: 1, H: 28, W: 28}, Classes: 10}
	for i := range d.X {
		d.X[i] = float32(i%255) / 255
	}
	b.SetBytes(int64(4*len(d.X) + 8*len(d.Y)))
	for b.Loop() {
		d.HashExamples(sha256.New(), 0, d.Len())
	}
}
