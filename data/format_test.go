package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func idxBytes(dims []int, values []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, values...)
}

func randBytes(rng *rand.Rand, n, mod int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(mod))
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

type idxSplit struct {
	pix, lab []byte
	n        int
}

// writeIDXDir writes an MNIST-style directory of n x h x w images.
func writeIDXDir(t testing.TB, dir string, compress bool, h, w int, ns [2]int, seed uint64) [2]idxSplit {
	rng := rand.New(rand.NewPCG(seed, 0))
	var out [2]idxSplit
	for k, split := range []string{"train", "t10k"} {
		n := ns[k]
		pix, lab := randBytes(rng, n*h*w, 256), randBytes(rng, n, 10)
		out[k] = idxSplit{pix, lab, n}
		ib, lb := idxBytes([]int{n, h, w}, pix), idxBytes([]int{n}, lab)
		suffix := ""
		if compress {
			ib, lb, suffix = gz(t, ib), gz(t, lb), ".gz"
		}
		writeFile(t, filepath.Join(dir, split+"-images-idx3-ubyte"+suffix), ib)
		writeFile(t, filepath.Join(dir, split+"-labels-idx1-ubyte"+suffix), lb)
	}
	return out
}

func checkIDX(t *testing.T, d *Dataset, s idxSplit, h, w int) {
	t.Helper()
	if d.Len() != s.n || d.Shape != (Shape{1, h, w}) || d.Classes <= int(maxByte(s.lab)) {
		t.Fatalf("%s: %d examples of %v, %d classes", d.Name, d.Len(), d.Shape, d.Classes)
	}
	for i, p := range s.pix {
		if d.X[i] != float32(p)/255 {
			t.Fatalf("%s: feature %d = %v, want %d/255", d.Name, i, d.X[i], p)
		}
	}
	for i, l := range s.lab {
		if d.Y[i] != int(l) {
			t.Fatalf("%s: label %d = %d, want %d", d.Name, i, d.Y[i], l)
		}
	}
}

func maxByte(b []byte) byte {
	var m byte
	for _, v := range b {
		m = max(m, v)
	}
	return m
}

func TestLoadDirIDX(t *testing.T) {
	for _, compress := range []bool{false, true} {
		dir := t.TempDir()
		want := writeIDXDir(t, dir, compress, 5, 4, [2]int{13, 6}, 1)
		train, test, err := LoadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		checkIDX(t, train, want[0], 5, 4)
		checkIDX(t, test, want[1], 5, 4)
		// Classes is one more than the largest label of either split.
		wantClasses := int(max(maxByte(want[0].lab), maxByte(want[1].lab))) + 1
		if train.Classes != wantClasses || test.Classes != wantClasses {
			t.Fatalf("train %d classes, test %d, want %d", train.Classes, test.Classes, wantClasses)
		}
	}
	// The ".idx" spelling some mirrors use.
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(2, 0))
	for _, split := range []string{"train", "t10k"} {
		writeFile(t, filepath.Join(dir, split+"-images.idx3-ubyte"), idxBytes([]int{2, 28, 28}, randBytes(rng, 2*784, 256)))
		writeFile(t, filepath.Join(dir, split+"-labels.idx1-ubyte"), idxBytes([]int{2}, []byte{3, 9}))
	}
	tr, _, err := LoadMNIST(dir)
	if err != nil || tr.Len() != 2 || tr.Y[1] != 9 || tr.Name != "mnist/train" {
		t.Fatalf("dotted names: %v %+v", err, tr)
	}
}

// cifarRecords returns n random CIFAR records (labelBytes label bytes each).
func cifarRecords(rng *rand.Rand, n int, hundred bool) []byte {
	var b []byte
	for range n {
		if hundred {
			b = append(b, byte(rng.IntN(20)), byte(rng.IntN(100)))
		} else {
			b = append(b, byte(rng.IntN(10)))
		}
		b = append(b, randBytes(rng, cifarPixels, 256)...)
	}
	return b
}

// checkCIFAR compares d against the raw records: CHW order is the file's
// order, so feature k of example i is byte k of the record's image.
func checkCIFAR(t *testing.T, d *Dataset, raw []byte, hundred bool) {
	t.Helper()
	rec, lab := cifar10Record, 1
	if hundred {
		rec, lab = cifar100Rec, 2
	}
	n := len(raw) / rec
	if d.Len() != n || d.Shape != cifarShape {
		t.Fatalf("%s: %d examples of %v, want %d of 3x32x32", d.Name, d.Len(), d.Shape, n)
	}
	for i := 0; i < n; i++ {
		r := raw[i*rec : (i+1)*rec]
		if hundred {
			if d.Coarse[i] != int(r[0]) || d.Y[i] != int(r[1]) || d.Classes != 100 || d.CoarseClasses != 20 {
				t.Fatalf("record %d: labels (%d,%d), want (%d,%d)", i, d.Coarse[i], d.Y[i], r[0], r[1])
			}
		} else if d.Y[i] != int(r[0]) || d.Classes != 10 {
			t.Fatalf("record %d: label %d, want %d", i, d.Y[i], r[0])
		}
		ex := d.Example(i)
		for k, p := range r[lab:] {
			if ex[k] != float32(p)/255 {
				t.Fatalf("record %d feature %d (channel %d, row %d, col %d) = %v, want %d/255", i, k, k/1024, k/32%32, k%32, ex[k], p)
			}
		}
	}
}

func TestLoadDirCIFAR10(t *testing.T) {
	for _, layout := range []struct {
		sub      string
		compress bool
	}{{"", false}, {"cifar-10-batches-bin", true}} {
		root := t.TempDir()
		dir := filepath.Join(root, layout.sub)
		rng := rand.New(rand.NewPCG(3, 0))
		var all []byte
		for i := 1; i <= 5; i++ {
			b := cifarRecords(rng, i, false)
			all = append(all, b...)
			name := filepath.Join(dir, "data_batch_"+string(rune('0'+i))+".bin")
			if layout.compress {
				b, name = gz(t, b), name+".gz"
			}
			writeFile(t, name, b)
		}
		tb := cifarRecords(rng, 4, false)
		writeFile(t, filepath.Join(dir, "test_batch.bin"), tb)
		train, test, err := LoadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		checkCIFAR(t, train, all, false)
		checkCIFAR(t, test, tb, false)
		if train.Name != "cifar10/train" {
			t.Fatalf("name %q", train.Name)
		}
	}
}

func TestLoadDirCIFAR100(t *testing.T) {
	root := t.TempDir()
	rng := rand.New(rand.NewPCG(4, 0))
	tr, te := cifarRecords(rng, 7, true), cifarRecords(rng, 3, true)
	writeFile(t, filepath.Join(root, "cifar-100-binary", "train.bin"), tr)
	writeFile(t, filepath.Join(root, "cifar-100-binary", "test.bin.gz"), gz(t, te))
	train, test, err := LoadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	checkCIFAR(t, train, tr, true)
	checkCIFAR(t, test, te, true)
}

func TestMalformedFiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 0))
	good := idxBytes([]int{3, 4, 4}, randBytes(rng, 48, 256))
	idxCases := map[string][]byte{
		"empty":          nil,
		"short header":   good[:3],
		"truncated dims": good[:10],
		"truncated data": good[:len(good)-1],
		"oversized":      append(append([]byte(nil), good...), 0),
		"wrong magic":    append([]byte{1}, good[1:]...),
		"int32 type":     append([]byte{0, 0, 0x0c}, good[3:]...),
		"zero dims":      {0, 0, 8, 0},
		"zero size":      idxBytes([]int{0, 4}, nil),
		"huge dims":      idxBytes([]int{1 << 20, 1 << 20}, nil),
		"garbage":        randBytes(rng, 100, 256),
		"gz truncated":   gz(t, good)[:30],
		"gz oversized":   gz(t, append(append([]byte(nil), good...), 1, 2)),
	}
	bad := gz(t, good)
	bad[len(bad)-6] ^= 0xff // corrupt the CRC
	idxCases["gz bad checksum"] = bad
	for name, b := range idxCases {
		if _, _, err := DecodeIDX(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("idx %s: error %v, want ErrFormat", name, err)
		}
	}
	if _, _, err := DecodeIDX(bytes.NewReader(good)); err != nil {
		t.Fatalf("good idx rejected: %v", err)
	}

	rec := cifarRecords(rng, 2, false)
	cifarCases := map[string][]byte{
		"empty":       nil,
		"truncated":   rec[:len(rec)-1],
		"oversized":   append(append([]byte(nil), rec...), 7),
		"label 10":    append([]byte{10}, rec[1:]...),
		"garbage":     randBytes(rng, 1000, 256),
		"gz truncate": gz(t, rec)[:100],
	}
	for name, b := range cifarCases {
		if _, err := DecodeCIFAR10(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("cifar-10 %s: error %v, want ErrFormat", name, err)
		}
	}
	rec100 := cifarRecords(rng, 1, true)
	for name, b := range map[string][]byte{
		"coarse 20": append([]byte{20}, rec100[1:]...),
		"fine 100":  append([]byte{0, 100}, rec100[2:]...),
		"cifar-10":  rec[:cifar10Record],
	} {
		if _, err := DecodeCIFAR100(bytes.NewReader(b)); !errors.Is(err, ErrFormat) {
			t.Errorf("cifar-100 %s: error %v, want ErrFormat", name, err)
		}
	}

	// Directory-level problems.
	dir := t.TempDir()
	writeIDXDir(t, dir, false, 4, 4, [2]int{3, 2}, 6)
	writeFile(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), idxBytes([]int{5}, make([]byte, 5)))
	if _, _, err := LoadDir(dir); !errors.Is(err, ErrFormat) {
		t.Errorf("image/label count mismatch: %v", err)
	}
	writeFile(t, filepath.Join(dir, "t10k-labels-idx1-ubyte"), idxBytes([]int{2}, []byte{1, 12}))
	if _, _, err := LoadFashionMNIST(dir); !errors.Is(err, ErrFormat) {
		t.Errorf("label 12 in a 10-class dataset: %v", err)
	}
	c10 := t.TempDir()
	writeFile(t, filepath.Join(c10, "data_batch_1.bin"), rec)
	writeFile(t, filepath.Join(c10, "test_batch.bin"), rec)
	if _, _, err := LoadDir(c10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing CIFAR-10 batches 2-5: %v", err)
	}
	if _, _, err := LoadDir(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty directory: %v", err)
	}
	if _, _, err := LoadDir(filepath.Join(dir, "t10k-labels-idx1-ubyte")); !errors.Is(err, dpcore.ErrInvalid) {
		t.Errorf("file as directory: %v", err)
	}
}

func FuzzIDX(f *testing.F) {
	f.Add(idxBytes([]int{2, 3, 3}, make([]byte, 18)))
	f.Add(idxBytes([]int{4}, []byte{1, 2, 3, 4}))
	f.Add(gz(f, idxBytes([]int{1, 2, 2}, []byte{9, 8, 7, 6})))
	f.Fuzz(func(t *testing.T, b []byte) {
		dims, v, err := DecodeIDX(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		n := 1
		for _, d := range dims {
			n *= d
		}
		if n != len(v) {
			t.Fatalf("dims %v but %d values", dims, len(v))
		}
	})
}

func FuzzCIFAR(f *testing.F) {
	rng := rand.New(rand.NewPCG(7, 0))
	f.Add(cifarRecords(rng, 1, false), false)
	f.Add(cifarRecords(rng, 1, true), true)
	f.Add(gz(f, cifarRecords(rng, 2, false)), false)
	f.Fuzz(func(t *testing.T, b []byte, hundred bool) {
		d, err := decodeCIFAR(bytes.NewReader(b), hundred, len(b))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if len(d.X) != d.Len()*cifarPixels {
			t.Fatalf("%d features for %d examples", len(d.X), d.Len())
		}
		for _, l := range d.Y {
			if l < 0 || l >= d.Classes {
				t.Fatalf("label %d of %d classes", l, d.Classes)
			}
		}
	})
}
