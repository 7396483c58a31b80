package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// maxFileBytes bounds the decoded size of one dataset file (CIFAR-100's
// train.bin is 150 MB), so a corrupt header or a gzip bomb cannot make a
// loader allocate without limit.
const maxFileBytes = 1 << 30

// byteScale maps a pixel byte to [0,1].
var byteScale = func() (t [256]float32) {
	for i := range t {
		t[i] = float32(i) / 255
	}
	return t
}()

// openMaybeGzip opens path and transparently decompresses it when it starts
// with the gzip magic, whatever its name.
func openMaybeGzip(path string) (io.Reader, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	br := bufio.NewReaderSize(f, 1<<16)
	r, err := maybeGzip(br)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, f.Close, nil
}

func maybeGzip(br *bufio.Reader) (io.Reader, error) {
	magic, err := br.Peek(2)
	if err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, formatf("gzip header: %v", err)
		}
		return zr, nil
	}
	return br, nil
}

// readExact reads exactly n bytes from r and checks that r then ends, so
// truncated and oversized inputs are both reported. Reading to EOF also
// makes gzip verify its checksum. The buffer grows with the data actually
// read, so a header that declares a huge size over a short input costs
// little memory.
func readExact(r io.Reader, n int, what string) ([]byte, error) {
	var buf bytes.Buffer
	// ReadFrom wants bytes.MinRead spare bytes; granting them up front keeps
	// it from doubling the buffer on the final read.
	buf.Grow(min(n, 1<<26) + bytes.MinRead)
	if _, err := buf.ReadFrom(io.LimitReader(r, int64(n)+1)); err != nil {
		// Files read cleanly; read errors come from gzip/flate.
		return nil, corrupt(what, err)
	}
	if got := buf.Len(); got != n {
		// A damaged gzip stream decodes to any length: read it to its end
		// (bounded) so that its checks, not the length, name the fault.
		if _, err := io.Copy(io.Discard, io.LimitReader(r, maxFileBytes)); err != nil {
			return nil, corrupt(what, err)
		}
	}
	switch got := buf.Len(); {
	case got < n:
		return nil, formatf("%s: truncated: %d of %d data bytes", what, got, n)
	case got > n:
		return nil, formatf("%s: oversized: data continues past the %d bytes the header declares", what, n)
	}
	return buf.Bytes(), nil
}

// DecodeIDX reads one IDX array of unsigned bytes (the MNIST format: two
// zero bytes, type 0x08, the number of dimensions, big-endian uint32 sizes,
// then the data), gzipped or not. The input must hold exactly the declared
// data.
func DecodeIDX(r io.Reader) (dims []int, values []byte, err error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 1<<16)
	}
	rr, err := maybeGzip(br)
	if err != nil {
		return nil, nil, fmt.Errorf("data: idx: %w", err)
	}
	var head [4]byte
	if _, err := io.ReadFull(rr, head[:]); err != nil {
		return nil, nil, formatf("idx: truncated header: %v", err)
	}
	if head[0] != 0 || head[1] != 0 {
		return nil, nil, formatf("idx: wrong magic % x (want 00 00 08 nn)", head)
	}
	if head[2] != 0x08 {
		return nil, nil, formatf("idx: element type 0x%02x, only unsigned bytes (0x08) are supported", head[2])
	}
	nd := int(head[3])
	if nd < 1 || nd > 4 {
		return nil, nil, formatf("idx: %d dimensions, want 1 to 4", nd)
	}
	raw := make([]byte, 4*nd)
	if _, err := io.ReadFull(rr, raw); err != nil {
		return nil, nil, formatf("idx: truncated header: %v", err)
	}
	dims = make([]int, nd)
	total := 1
	for i := range dims {
		dims[i] = int(binary.BigEndian.Uint32(raw[4*i:]))
		if dims[i] == 0 {
			return nil, nil, formatf("idx: dimension %d is 0", i)
		}
		if total > maxFileBytes/dims[i] {
			return nil, nil, formatf("idx: dimensions %v exceed %d bytes", dims[:i+1], maxFileBytes)
		}
		total *= dims[i]
	}
	values, err = readExact(rr, total, fmt.Sprintf("idx %v", dims))
	if err != nil {
		return nil, nil, err
	}
	return dims, values, nil
}

func readIDXFile(path string) ([]int, []byte, error) {
	r, closer, err := openMaybeGzip(path)
	if err != nil {
		return nil, nil, fmt.Errorf("data: %w", err)
	}
	defer closer()
	dims, v, err := DecodeIDX(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return dims, v, nil
}

// LoadIDX reads an IDX image file (N x H x W unsigned bytes) and its IDX
// label file (N unsigned bytes), gzipped or not, into a Dataset of shape
// 1 x H x W with pixels scaled to [0,1]. classes <= 0 means one more than
// the largest label.
func LoadIDX(imagesPath, labelsPath string, classes int) (*Dataset, error) {
	idims, pix, err := readIDXFile(imagesPath)
	if err != nil {
		return nil, err
	}
	ldims, lab, err := readIDXFile(labelsPath)
	if err != nil {
		return nil, err
	}
	return idxDataset(idims, pix, ldims, lab, classes)
}

func idxDataset(idims []int, pix []byte, ldims []int, lab []byte, classes int) (*Dataset, error) {
	if len(idims) != 3 {
		return nil, formatf("idx images: dimensions %v, want N x H x W", idims)
	}
	if len(ldims) != 1 {
		return nil, formatf("idx labels: dimensions %v, want N", ldims)
	}
	n := idims[0]
	if ldims[0] != n {
		return nil, formatf("idx: %d images but %d labels", n, ldims[0])
	}
	shape := Shape{C: 1, H: idims[1], W: idims[2]}
	if !shape.valid() {
		return nil, formatf("idx: image shape %v", shape)
	}
	maxLabel := 0
	y := make([]int, n)
	for i, l := range lab {
		y[i] = int(l)
		maxLabel = max(maxLabel, int(l))
	}
	if classes <= 0 {
		classes = maxLabel + 1
	} else if maxLabel >= classes {
		return nil, formatf("idx labels: label %d, want fewer than %d classes", maxLabel, classes)
	}
	x := make([]float32, len(pix))
	for i, p := range pix {
		x[i] = byteScale[p]
	}
	return &Dataset{X: x, Y: y, Shape: shape, Classes: classes}, nil
}

// corrupt reports a compressed stream that fails its own checks (gzip's
// CRC and length, flate's block structure).
func corrupt(what string, err error) error {
	return fmt.Errorf("data: %w: %s: corrupt compressed data (the file is damaged; fetch it again): %w", ErrFormat, what, err)
}
