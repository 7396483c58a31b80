// Command mksubset writes the class-balanced Fashion-MNIST subset that
// package data embeds: the first -train examples of each class of the
// training file and the first -test of each class of the test file, in file
// order, as gzipped IDX files.
//
// It was run once as
//
//	go run ./data/internal/mksubset -src /usr/share/datasets/fashion-mnist -dst data/embedded
//
// and its output is committed.
package main

import (
	"compress/gzip"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dpmf-go/dpmf/data"
)

func main() {
	src := flag.String("src", data.DefaultFashionMNISTDir, "Fashion-MNIST IDX directory")
	dst := flag.String("dst", "data/embedded", "output directory")
	perTrain := flag.Int("train", 600, "training examples per class")
	perTest := flag.Int("test", 100, "test examples per class")
	flag.Parse()
	if err := run(*src, *dst, *perTrain, *perTest); err != nil {
		fmt.Fprintln(os.Stderr, "mksubset:", err)
		os.Exit(1)
	}
}

func run(src, dst string, perTrain, perTest int) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, sp := range []struct {
		split string
		per   int
	}{{"train", perTrain}, {"t10k", perTest}} {
		img, err := readIDX(filepath.Join(src, sp.split+"-images-idx3-ubyte.gz"))
		if err != nil {
			return err
		}
		lab, err := readIDX(filepath.Join(src, sp.split+"-labels-idx1-ubyte.gz"))
		if err != nil {
			return err
		}
		const classes = 10
		h, w := img.dims[1], img.dims[2]
		var keepImg, keepLab []byte
		count := make([]int, classes)
		for i, l := range lab.values {
			if int(l) >= classes || count[l] >= sp.per {
				continue
			}
			count[l]++
			keepLab = append(keepLab, l)
			keepImg = append(keepImg, img.values[i*h*w:(i+1)*h*w]...)
		}
		for c, k := range count {
			if k != sp.per {
				return fmt.Errorf("%s: class %d has only %d examples", sp.split, c, k)
			}
		}
		n := len(keepLab)
		if err := writeIDX(filepath.Join(dst, sp.split+"-images-idx3-ubyte.gz"), []int{n, h, w}, keepImg); err != nil {
			return err
		}
		if err := writeIDX(filepath.Join(dst, sp.split+"-labels-idx1-ubyte.gz"), []int{n}, keepLab); err != nil {
			return err
		}
	}
	return nil
}

type idx struct {
	dims   []int
	values []byte
}

func readIDX(path string) (idx, error) {
	f, err := os.Open(path)
	if err != nil {
		return idx{}, err
	}
	defer f.Close()
	dims, v, err := data.DecodeIDX(f)
	return idx{dims, v}, err
}

func writeIDX(path string, dims []int, values []byte) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(f, gzip.BestCompression)
	if err != nil {
		f.Close()
		return err
	}
	head := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		head = binary.BigEndian.AppendUint32(head, uint32(d))
	}
	_, err1 := zw.Write(head)
	_, err2 := zw.Write(values)
	err3 := zw.Close()
	err4 := f.Close()
	for _, e := range []error{err1, err2, err3, err4} {
		if e != nil {
			return e
		}
	}
	return nil
}
