package data

import (
	"bytes"
	"embed"
	"fmt"
)

// embeddedFS holds a class-balanced subset of real Fashion-MNIST (Xiao,
// Rasul & Vollgraf 2017; copyright 2017 Zalando SE, MIT license, see
// embedded/LICENSE) as gzipped IDX files, about 2.9 MiB. The linker drops it
// from programs that never call LoadEmbeddedFashionMNIST.
//
//go:embed embedded/*.gz
var embeddedFS embed.FS

// Sizes of the embedded Fashion-MNIST subset.
const (
	EmbeddedTrainPerClass = 600
	EmbeddedTestPerClass  = 100
)

// LoadEmbeddedFashionMNIST returns the Fashion-MNIST subset compiled into
// the package: 6,000 training examples (the first 600 of each class in the
// official training file's order) and 1,000 test examples (the first 100 of
// each class of the official test file), 1 x 28 x 28 in [0,1], 10 classes.
// The selection is made by data/internal/mksubset. Source: Fashion-MNIST
// (https://github.com/zalandoresearch/fashion-mnist), Zalando SE, MIT
// license. It lets a default run work without the Debian package
// dataset-fashion-mnist; accuracy on it is not comparable to the full
// dataset's.
func LoadEmbeddedFashionMNIST() (train, test *Dataset, err error) {
	load := func(split, name string) (*Dataset, error) {
		open := func(kind string) ([]int, []byte, error) {
			b, err := embeddedFS.ReadFile("embedded/" + split + "-" + kind + "-ubyte.gz")
			if err != nil {
				return nil, nil, err
			}
			return DecodeIDX(bytes.NewReader(b))
		}
		idims, pix, err := open("images-idx3")
		if err != nil {
			return nil, err
		}
		ldims, lab, err := open("labels-idx1")
		if err != nil {
			return nil, err
		}
		d, err := idxDataset(idims, pix, ldims, lab, 10)
		if err != nil {
			return nil, err
		}
		d.Name = name
		return d, nil
	}
	train, test, err = loadParallel(
		func() (*Dataset, error) { return load("train", "fashion-mnist-embedded/train") },
		func() (*Dataset, error) { return load("t10k", "fashion-mnist-embedded/test") })
	if err != nil {
		return nil, nil, fmt.Errorf("data: embedded fashion-mnist: %w", err)
	}
	return train, test, nil
}
