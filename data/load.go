package data

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// DefaultFashionMNISTDir is where the Debian package dataset-fashion-mnist
// installs Fashion-MNIST.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

func bufioReader(r io.Reader) *bufio.Reader {
	if br, ok := r.(*bufio.Reader); ok {
		return br
	}
	return bufio.NewReaderSize(r, 1<<16)
}

// findFile returns the first of names (each tried as is and with ".gz")
// that exists in dir.
func findFile(dir string, names ...string) (string, bool) {
	for _, n := range names {
		for _, cand := range []string{n, n + ".gz"} {
			p := filepath.Join(dir, cand)
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p, true
			}
		}
	}
	return "", false
}

// loadParallel loads the training and test sets concurrently (decoding is
// CPU bound and the two are independent).
func loadParallel(train, test func() (*Dataset, error)) (*Dataset, *Dataset, error) {
	var te *Dataset
	errc := make(chan error, 1)
	go func() {
		var err error
		te, err = test()
		errc <- err
	}()
	tr, err1 := train()
	err2 := <-errc
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	return tr, te, nil
}

// idxNames are the file names MNIST-style datasets ship under.
func idxNames(split, kind string) []string {
	// split is "train" or "t10k", kind "images-idx3" or "labels-idx1".
	dot := strings.Replace(kind, "-idx", ".idx", 1)
	return []string{split + "-" + kind + "-ubyte", split + "-" + dot + "-ubyte"}
}

func loadIDXSplit(dir, split, name string, classes int) (*Dataset, error) {
	ip, ok1 := findFile(dir, idxNames(split, "images-idx3")...)
	lp, ok2 := findFile(dir, idxNames(split, "labels-idx1")...)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("data: %s: %w: no %s-images-idx3-ubyte[.gz] and %s-labels-idx1-ubyte[.gz] in %s", name, fs.ErrNotExist, split, split, dir)
	}
	d, err := LoadIDX(ip, lp, classes)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, name)
	}
	d.Name = name
	return d, nil
}

// LoadIDXDir loads an MNIST-style directory: train-images-idx3-ubyte,
// train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte,
// each optionally gzipped (a ".gz" suffix; content is detected by magic).
// classes <= 0 means one more than the largest label of either split.
func LoadIDXDir(dir string, classes int) (train, test *Dataset, err error) {
	base := filepath.Base(filepath.Clean(dir))
	train, test, err = loadParallel(
		func() (*Dataset, error) { return loadIDXSplit(dir, "train", base+"/train", classes) },
		func() (*Dataset, error) { return loadIDXSplit(dir, "t10k", base+"/test", classes) },
	)
	if err != nil {
		return nil, nil, err
	}
	if classes <= 0 {
		c := max(train.Classes, test.Classes)
		train.Classes, test.Classes = c, c
	}
	if train.Shape != test.Shape {
		return nil, nil, formatf("%s: train shape %v, test shape %v", dir, train.Shape, test.Shape)
	}
	return train, test, nil
}

func loadNamedIDX(dir, name string) (train, test *Dataset, err error) {
	train, test, err = LoadIDXDir(dir, 10)
	if err != nil {
		return nil, nil, err
	}
	train.Name, test.Name = name+"/train", name+"/test"
	want := Shape{C: 1, H: 28, W: 28}
	if train.Shape != want {
		return nil, nil, formatf("%s: images are %v, want %v", name, train.Shape, want)
	}
	if err := checkIDXContent(name, dir, train, test); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// LoadMNIST loads MNIST (10 classes, 1 x 28 x 28) from an IDX directory,
// refusing one whose pixels are clearly Fashion-MNIST's (*MismatchError).
func LoadMNIST(dir string) (train, test *Dataset, err error) { return loadNamedIDX(dir, "mnist") }

// LoadFashionMNIST loads Fashion-MNIST (10 classes, 1 x 28 x 28) from an IDX
// directory such as DefaultFashionMNISTDir, refusing one whose pixels are
// clearly MNIST's (*MismatchError).
func LoadFashionMNIST(dir string) (train, test *Dataset, err error) {
	return loadNamedIDX(dir, "fashion-mnist")
}

func loadCIFARFile(path string, hundred bool) (*Dataset, error) {
	hint := 0
	if st, err := os.Stat(path); err == nil && !strings.HasSuffix(path, ".gz") {
		hint = int(st.Size())
	}
	r, closer, err := openMaybeGzip(path)
	if err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	defer closer()
	d, err := decodeCIFAR(r, hundred, hint)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return d, nil
}

// cifarDir returns dir or its standard subdirectory sub if marker is there.
func cifarDir(dir, sub, marker string) (string, bool) {
	for _, d := range []string{dir, filepath.Join(dir, sub)} {
		if _, ok := findFile(d, marker); ok {
			return d, true
		}
	}
	return "", false
}

// LoadCIFAR10 loads the binary CIFAR-10 (data_batch_1.bin .. data_batch_5.bin
// and test_batch.bin, each optionally gzipped) from dir or from its
// cifar-10-batches-bin subdirectory. All five training batches must be
// present: a missing one would silently shrink the training set.
func LoadCIFAR10(dir string) (train, test *Dataset, err error) {
	d, ok := cifarDir(dir, "cifar-10-batches-bin", "data_batch_1.bin")
	if !ok {
		return nil, nil, fmt.Errorf("data: cifar-10: %w: no data_batch_1.bin in %s or its cifar-10-batches-bin", fs.ErrNotExist, dir)
	}
	var paths []string
	for i := 1; i <= 5; i++ {
		p, ok := findFile(d, fmt.Sprintf("data_batch_%d.bin", i))
		if !ok {
			return nil, nil, fmt.Errorf("data: cifar-10: %w: data_batch_%d.bin missing in %s", fs.ErrNotExist, i, d)
		}
		paths = append(paths, p)
	}
	tp, ok := findFile(d, "test_batch.bin")
	if !ok {
		return nil, nil, fmt.Errorf("data: cifar-10: %w: test_batch.bin missing in %s", fs.ErrNotExist, d)
	}
	train, test, err = loadParallel(func() (*Dataset, error) {
		var parts []*Dataset
		for _, p := range paths {
			b, err := loadCIFARFile(p, false)
			if err != nil {
				return nil, err
			}
			parts = append(parts, b)
		}
		return concat(parts), nil
	}, func() (*Dataset, error) { return loadCIFARFile(tp, false) })
	if err != nil {
		return nil, nil, err
	}
	train.Name, test.Name = "cifar10/train", "cifar10/test"
	return train, test, nil
}

// LoadCIFAR100 loads the binary CIFAR-100 (train.bin and test.bin, each
// optionally gzipped) from dir or its cifar-100-binary subdirectory.
func LoadCIFAR100(dir string) (train, test *Dataset, err error) {
	d, ok := cifarDir(dir, "cifar-100-binary", "train.bin")
	if !ok {
		return nil, nil, fmt.Errorf("data: cifar-100: %w: no train.bin in %s or its cifar-100-binary", fs.ErrNotExist, dir)
	}
	trp, _ := findFile(d, "train.bin")
	tep, ok := findFile(d, "test.bin")
	if !ok {
		return nil, nil, fmt.Errorf("data: cifar-100: %w: test.bin missing in %s", fs.ErrNotExist, d)
	}
	train, test, err = loadParallel(
		func() (*Dataset, error) { return loadCIFARFile(trp, true) },
		func() (*Dataset, error) { return loadCIFARFile(tep, true) })
	if err != nil {
		return nil, nil, err
	}
	train.Name, test.Name = "cifar100/train", "cifar100/test"
	return train, test, nil
}

func concat(parts []*Dataset) *Dataset {
	out := *parts[0]
	n := 0
	for _, p := range parts {
		n += len(p.Y)
	}
	out.X = make([]float32, 0, n*out.Shape.Size())
	out.Y = make([]int, 0, n)
	for _, p := range parts {
		out.X = append(out.X, p.X...)
		out.Y = append(out.Y, p.Y...)
	}
	return &out
}

// Format is a dataset layout on disk.
type Format int

const (
	// FormatUnknown: none of the layouts below.
	FormatUnknown Format = iota
	// FormatIDX: an MNIST-style IDX directory (MNIST, Fashion-MNIST).
	FormatIDX
	// FormatCIFAR10: the binary CIFAR-10 batches.
	FormatCIFAR10
	// FormatCIFAR100: the binary CIFAR-100 train.bin and test.bin.
	FormatCIFAR100
)

func (f Format) String() string {
	switch f {
	case FormatIDX:
		return "IDX (MNIST-style)"
	case FormatCIFAR10:
		return "CIFAR-10"
	case FormatCIFAR100:
		return "CIFAR-100"
	}
	return "unknown"
}

// DetectFormat says which layout dir holds: CIFAR-10 (data_batch_1.bin),
// CIFAR-100 (train.bin), both also in their standard subdirectories, or
// IDX (train-images-idx3-ubyte); any file may be gzipped. A directory that
// does not exist, is not a directory, or holds none of them is an error.
func DetectFormat(dir string) (Format, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return FormatUnknown, fmt.Errorf("data: %w", err)
	}
	if !st.IsDir() {
		return FormatUnknown, invalidf("%s is not a directory", dir)
	}
	if _, ok := cifarDir(dir, "cifar-10-batches-bin", "data_batch_1.bin"); ok {
		return FormatCIFAR10, nil
	}
	if _, ok := cifarDir(dir, "cifar-100-binary", "train.bin"); ok {
		return FormatCIFAR100, nil
	}
	if _, ok := findFile(dir, idxNames("train", "images-idx3")...); ok {
		return FormatIDX, nil
	}
	return FormatUnknown, fmt.Errorf("data: %w: %s holds no CIFAR-10 (data_batch_1.bin), CIFAR-100 (train.bin) or IDX (train-images-idx3-ubyte) files", fs.ErrNotExist, dir)
}

// LoadDir detects the dataset format in dir and loads it: CIFAR-10
// (data_batch_1.bin), CIFAR-100 (train.bin), both also in their standard
// subdirectories, or an MNIST-style IDX directory (train-images-idx3-ubyte).
// Any file may be gzipped.
func LoadDir(dir string) (train, test *Dataset, err error) {
	f, err := DetectFormat(dir)
	if err != nil {
		return nil, nil, err
	}
	switch f {
	case FormatCIFAR10:
		return LoadCIFAR10(dir)
	case FormatCIFAR100:
		return LoadCIFAR100(dir)
	}
	return LoadIDXDir(dir, 0)
}

// Named datasets that LoadNamed knows.
const (
	NameFashionMNIST = "fashion-mnist"
	NameMNIST        = "mnist"
	NameCIFAR10      = "cifar10"
	NameCIFAR100     = "cifar100"
)

// LoadNamed loads the dataset name (NameFashionMNIST, NameMNIST,
// NameCIFAR10, NameCIFAR100) from dir, refusing with a *MismatchError a
// directory that holds another dataset: CIFAR-100 files are not loaded as
// CIFAR-10, nor CIFAR files as MNIST, nor Fashion-MNIST as MNIST (the two
// share one format and shape and are told apart by their pixels,
// DetectIDXContent).
func LoadNamed(name, dir string) (train, test *Dataset, err error) {
	var want Format
	var load func(string) (*Dataset, *Dataset, error)
	switch name {
	case NameFashionMNIST:
		want, load = FormatIDX, LoadFashionMNIST
	case NameMNIST:
		want, load = FormatIDX, LoadMNIST
	case NameCIFAR10:
		want, load = FormatCIFAR10, LoadCIFAR10
	case NameCIFAR100:
		want, load = FormatCIFAR100, LoadCIFAR100
	default:
		return nil, nil, invalidf("unknown dataset %q: want %s, %s, %s or %s", name, NameFashionMNIST, NameMNIST, NameCIFAR10, NameCIFAR100)
	}
	got, err := DetectFormat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %s: %w", name, stripPrefix(err))
	}
	if got != want {
		found := map[Format]string{FormatCIFAR10: NameCIFAR10, FormatCIFAR100: NameCIFAR100}[got]
		return nil, nil, &MismatchError{Name: name, Dir: dir, Found: got.String() + " files", FoundName: found}
	}
	return load(dir)
}

// stripPrefix drops the "data: " of an error this package made, so that
// wrapping it again does not repeat the prefix.
func stripPrefix(err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), "data: "); ok {
		return prefixless{msg, err}
	}
	return err
}

type prefixless struct {
	msg string
	err error
}

func (p prefixless) Error() string { return p.msg }
func (p prefixless) Unwrap() error { return p.err }
