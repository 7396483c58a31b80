package data_test

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/text"
)

// writeTinyIDX writes a 2-example, 2 x 2 MNIST-style directory.
func writeTinyIDX(dir string) error {
	idx := func(dims []int, v []byte) []byte {
		b := []byte{0, 0, 0x08, byte(len(dims))}
		for _, d := range dims {
			b = binary.BigEndian.AppendUint32(b, uint32(d))
		}
		return append(b, v...)
	}
	files := map[string][]byte{
		"train-images-idx3-ubyte": idx([]int{2, 2, 2}, []byte{0, 255, 51, 102, 0, 0, 0, 255}),
		"train-labels-idx1-ubyte": idx([]int{2}, []byte{3, 1}),
		"t10k-images-idx3-ubyte":  idx([]int{1, 2, 2}, []byte{255, 255, 0, 0}),
		"t10k-labels-idx1-ubyte":  idx([]int{1}, []byte{0}),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ExampleLoadDir() {
	dir, err := os.MkdirTemp("", "idx")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	if err := writeTinyIDX(dir); err != nil {
		fmt.Println(err)
		return
	}

	// LoadDir recognizes CIFAR-10, CIFAR-100 and IDX directories; real runs
	// pass e.g. data.DefaultFashionMNISTDir.
	train, test, err := data.LoadDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(train.Len(), "train,", test.Len(), "test, shape", train.Shape, "classes", train.Classes)
	fmt.Println("example 0:", train.Example(0), "label", train.Y[0])

	// Gather a batch into reusable buffers.
	x := make([]float32, 2*train.Shape.Size())
	y := make([]int, 2)
	if err := train.Batch([]int{1, 0}, x, y); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("batch labels:", y)
	// Output:
	// 2 train, 1 test, shape 1x2x2 classes 4
	// example 0: [0 1 0.2 0.4] label 3
	// batch labels: [1 3]
}

func ExampleAugmenter() {
	train, _, err := data.SyntheticCIFAR(8, 0, 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	aug := data.Augmenter{Seed: 1, Pad: 4, Flip: true}
	x := make([]float32, 2*train.Shape.Size())
	y := make([]int, 2)
	// Step 17 of training: the crops depend only on (seed, step, example),
	// so a run resumed at step 17 sees the same augmented batch.
	if err := aug.Batch(train, []int{3, 5}, 17, x, y); err != nil {
		fmt.Println(err)
		return
	}
	resumed := data.Augmenter{Seed: 1, Pad: 4, Flip: true}
	x2 := make([]float32, len(x))
	if err := resumed.Batch(train, []int{3, 5}, 17, x2, y); err != nil {
		fmt.Println(err)
		return
	}
	same := true
	for i := range x {
		same = same && x[i] == x2[i]
	}
	fmt.Println("same batch after resume:", same)
	// Output: same batch after resume: true
}

// Documents packed into examples of 4 token ids for next-token prediction:
// each document ends with the end of text (256 for the byte tokenizer) and
// consecutive examples overlap by one token, so every token after the
// first is predicted once.
func ExampleNewTextDataset() {
	docs := []data.TextDocument{{Text: "Hi."}, {Text: "Ok"}}
	d, err := data.NewTextDataset(docs, text.Bytes{}, data.TextDataOptions{Task: data.NextToken, Context: 4})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range d.Len() {
		fmt.Println(d.Example(i))
	}
	// Output:
	// [72 105 46 256]
	// [256 79 107 256]
}
