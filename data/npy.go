package data

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
)

// NPY is one array read from a NumPy .npy file: its shape and its
// elements as float32 (integers beyond 2^24 and float64 values round), in
// C (row-major) order.
type NPY struct {
	Shape []int
	// Dtype is the NumPy type string of the file ("<f4", "|u1", ...).
	Dtype  string
	Values []float32
	// Integer says the elements were of an integer type (labels).
	Integer bool
}

// npyMaxHeader bounds the header of a .npy file; NumPy writes about 128
// bytes.
const npyMaxHeader = 1 << 16

// npyMaxElems bounds the elements of one array (1 GiB as float32); the
// data bytes are bounded by maxFileBytes too.
const npyMaxElems = 1 << 28

// DecodeNPY reads one array in NumPy's .npy format (versions 1.0 to 3.0):
// the magic "\x93NUMPY", a version, a header dict with 'descr',
// 'fortran_order' and 'shape', then the data, which must end exactly where
// the shape says. Supported element types are bool, signed and unsigned
// integers of 1 to 8 bytes and floats of 4 and 8 bytes, in either byte
// order; Fortran order, object arrays and structured types are refused.
// The sizes in the header are checked before anything is allocated, and
// the data buffer grows with the bytes actually read; every error wraps
// ErrFormat.
func DecodeNPY(r io.Reader) (*NPY, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	var pre [8]byte
	if _, err := io.ReadFull(br, pre[:]); err != nil {
		return nil, formatf("npy: truncated header: %v", err)
	}
	if string(pre[:6]) != "\x93NUMPY" {
		return nil, formatf("npy: wrong magic %q (want \\x93NUMPY)", pre[:6])
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return nil, formatf("npy: truncated header: %v", err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return nil, formatf("npy: truncated header: %v", err)
		}
		if n := binary.LittleEndian.Uint32(b[:]); n > npyMaxHeader {
			return nil, formatf("npy: header of %d bytes, more than %d", n, npyMaxHeader)
		} else {
			hlen = int(n)
		}
	default:
		return nil, formatf("npy: version %d.%d, want 1.0 to 3.0", pre[6], pre[7])
	}
	head := make([]byte, hlen)
	if _, err := io.ReadFull(br, head); err != nil {
		return nil, formatf("npy: truncated header: %v", err)
	}
	a, size, order, err := parseNPYHeader(string(head))
	if err != nil {
		return nil, err
	}
	n := 1
	for _, d := range a.Shape {
		if d < 0 || d > npyMaxElems || (d > 0 && n > npyMaxElems/d) {
			return nil, formatf("npy: shape %v: more than %d elements", a.Shape, npyMaxElems)
		}
		n *= d
	}
	if n > maxFileBytes/size {
		return nil, formatf("npy: shape %v of %s: more than %d data bytes", a.Shape, a.Dtype, maxFileBytes)
	}
	raw, err := readExact(br, n*size, fmt.Sprintf("npy %v %s", a.Shape, a.Dtype))
	if err != nil {
		return nil, err
	}
	a.Values = make([]float32, n)
	kind := a.Dtype[1]
	for i := range a.Values {
		b := raw[i*size : (i+1)*size]
		var u uint64
		switch size {
		case 1:
			u = uint64(b[0])
		case 2:
			u = uint64(order.Uint16(b))
		case 4:
			u = uint64(order.Uint32(b))
		case 8:
			u = order.Uint64(b)
		}
		switch kind {
		case 'b', 'u':
			a.Values[i] = float32(u)
		case 'i':
			a.Values[i] = float32(int64(u<<(64-8*size)) >> (64 - 8*size)) // sign-extend
		case 'f':
			if size == 4 {
				a.Values[i] = math.Float32frombits(uint32(u))
			} else {
				a.Values[i] = float32(math.Float64frombits(u))
			}
		}
	}
	return a, nil
}

// parseNPYHeader reads the header dict, a Python literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }.
func parseNPYHeader(h string) (a *NPY, size int, order binary.ByteOrder, err error) {
	h = strings.TrimSpace(h)
	if !strings.HasPrefix(h, "{") || !strings.HasSuffix(h, "}") {
		return nil, 0, nil, formatf("npy: header %.60q is not a dict", h)
	}
	a = &NPY{}
	seen := map[string]bool{}
	rest := strings.TrimSpace(h[1 : len(h)-1])
	for rest != "" {
		var key, val string
		if key, rest, err = npyString(rest); err != nil {
			return nil, 0, nil, err
		}
		rest = strings.TrimSpace(rest)
		if !strings.HasPrefix(rest, ":") {
			return nil, 0, nil, formatf("npy: header: no ':' after %q", key)
		}
		rest = strings.TrimSpace(rest[1:])
		switch key {
		case "descr":
			if val, rest, err = npyString(rest); err != nil {
				return nil, 0, nil, err
			}
			a.Dtype = val
		case "fortran_order":
			switch {
			case strings.HasPrefix(rest, "False"):
				rest = rest[len("False"):]
			case strings.HasPrefix(rest, "True"):
				return nil, 0, nil, formatf("npy: Fortran-order array: save it in C order (numpy.ascontiguousarray)")
			default:
				return nil, 0, nil, formatf("npy: header: fortran_order is not True or False")
			}
		case "shape":
			end := strings.IndexByte(rest, ')')
			if !strings.HasPrefix(rest, "(") || end < 0 {
				return nil, 0, nil, formatf("npy: header: shape is not a tuple")
			}
			for _, f := range strings.Split(rest[1:end], ",") {
				if f = strings.TrimSpace(f); f == "" {
					continue
				}
				d, err := strconv.Atoi(f)
				if err != nil || d < 0 {
					return nil, 0, nil, formatf("npy: header: shape dimension %q", f)
				}
				a.Shape = append(a.Shape, d)
			}
			rest = rest[end+1:]
		default:
			return nil, 0, nil, formatf("npy: header: unknown key %q", key)
		}
		if seen[key] {
			return nil, 0, nil, formatf("npy: header: key %q given twice", key)
		}
		seen[key] = true
		rest = strings.TrimSpace(rest)
		if strings.HasPrefix(rest, ",") {
			rest = strings.TrimSpace(rest[1:])
		} else if rest != "" {
			return nil, 0, nil, formatf("npy: header: no ',' after %q", key)
		}
	}
	if !seen["descr"] || !seen["shape"] || !seen["fortran_order"] {
		return nil, 0, nil, formatf("npy: header lacks descr, fortran_order or shape")
	}
	if size, order, a.Integer, err = npyType(a.Dtype); err != nil {
		return nil, 0, nil, err
	}
	return a, size, order, nil
}

// npyString reads a quoted Python string at the start of s.
func npyString(s string) (val, rest string, err error) {
	if len(s) < 2 || (s[0] != '\'' && s[0] != '"') {
		return "", "", formatf("npy: header: want a quoted string at %.20q", s)
	}
	end := strings.IndexByte(s[1:], s[0])
	if end < 0 {
		return "", "", formatf("npy: header: unterminated string")
	}
	return s[1 : end+1], s[end+2:], nil
}

// npyType returns the element size, byte order and integer-ness of a
// NumPy type string such as "<f4", "|u1" or ">i2".
func npyType(t string) (size int, order binary.ByteOrder, integer bool, err error) {
	if len(t) != 3 || strings.IndexByte("<>|=", t[0]) < 0 {
		return 0, nil, false, formatf("npy: element type %q: want bool, integers or float32/64 (e.g. <f4, |u1, <i8)", t)
	}
	order = binary.LittleEndian
	if t[0] == '>' {
		order = binary.BigEndian
	}
	size = int(t[2] - '0')
	switch {
	case t[1] == 'b' && size == 1, (t[1] == 'u' || t[1] == 'i') && (size == 1 || size == 2 || size == 4 || size == 8):
		return size, order, true, nil
	case t[1] == 'f' && (size == 4 || size == 8):
		return size, order, false, nil
	}
	return 0, nil, false, formatf("npy: element type %q: want bool, integers or float32/64 (e.g. <f4, |u1, <i8)", t)
}

// NPYDataset makes a Dataset of an array of examples x and a vector of
// labels y: x of shape (N, D) is N examples of D features (1x1 images of
// D channels, for tabular data), (N, H, W) N grey images, (N, H, W, C) N
// images with their channels last (NumPy's and Keras's layout), turned to
// CHW. Unsigned-byte pixels are scaled to [0, 1]; other values are kept,
// and must be finite. y must hold N integers in [0, classes); classes 0
// takes the largest label plus one.
func NPYDataset(x, y *NPY, classes int) (*Dataset, error) {
	if len(y.Shape) != 1 || !y.Integer {
		return nil, formatf("npy: labels of shape %v and type %s: want a vector of integers", y.Shape, y.Dtype)
	}
	if len(x.Shape) < 2 || len(x.Shape) > 4 || x.Shape[0] != y.Shape[0] {
		return nil, formatf("npy: examples of shape %v for %d labels: want (N, D), (N, H, W) or (N, H, W, C) with N = %d", x.Shape, y.Shape[0], y.Shape[0])
	}
	n := x.Shape[0]
	var s Shape
	switch len(x.Shape) {
	case 2:
		s = Shape{C: x.Shape[1], H: 1, W: 1}
	case 3:
		s = Shape{C: 1, H: x.Shape[1], W: x.Shape[2]}
	case 4:
		s = Shape{C: x.Shape[3], H: x.Shape[1], W: x.Shape[2]}
	}
	if !s.valid() {
		return nil, formatf("npy: example shape %v is not usable", s)
	}
	div := float32(1)
	if x.Dtype[1:] == "u1" {
		div = 255 // as the IDX and CIFAR loaders scale bytes
	}
	xs := make([]float32, len(x.Values))
	per := s.Size()
	for i := 0; i < n; i++ {
		for c := 0; c < s.C; c++ {
			for p := 0; p < s.H*s.W; p++ {
				// Source: channels last (p*C + c); destination CHW.
				v := x.Values[i*per+p*s.C+c] / div
				if v-v != 0 {
					return nil, formatf("npy: example %d holds %v, want finite float32 values", i, v)
				}
				xs[i*per+c*s.H*s.W+p] = v
			}
		}
	}
	ys := make([]int, n)
	maxLabel := 0
	for i, v := range y.Values {
		if v < 0 || v >= 1<<24 {
			return nil, formatf("npy: label %v of example %d: want 0 to 2^24", v, i)
		}
		ys[i] = int(v)
		maxLabel = max(maxLabel, ys[i])
	}
	if classes == 0 {
		classes = maxLabel + 1
	}
	if maxLabel >= classes {
		return nil, formatf("npy: label %d outside [0, %d)", maxLabel, classes)
	}
	return NewDataset(xs, ys, s, classes)
}

// LoadNPYDir loads x_train.npy, y_train.npy, x_test.npy and y_test.npy
// from dir (the names of Keras's datasets), each as DecodeNPY reads and
// NPYDataset lays out; the classes are the largest label of either split
// plus one.
func LoadNPYDir(dir string) (train, test *Dataset, err error) {
	arrays := map[string]*NPY{}
	for _, name := range []string{"x_train", "y_train", "x_test", "y_test"} {
		path := filepath.Join(dir, name+".npy")
		r, closeFn, err := openMaybeGzip(path)
		if err != nil {
			if _, ok := err.(*fs.PathError); ok {
				return nil, nil, fmt.Errorf("data: npy: %w", err)
			}
			return nil, nil, err
		}
		a, err := DecodeNPY(r)
		closeFn()
		if err != nil {
			return nil, nil, fmt.Errorf("%w (%s)", err, path)
		}
		arrays[name] = a
	}
	classes := 0
	for _, y := range []*NPY{arrays["y_train"], arrays["y_test"]} {
		for _, v := range y.Values {
			if v >= 0 && v < 1<<24 {
				classes = max(classes, int(v)+1)
			}
		}
	}
	if train, err = NPYDataset(arrays["x_train"], arrays["y_train"], classes); err != nil {
		return nil, nil, fmt.Errorf("%w (x_train.npy, y_train.npy in %s)", err, dir)
	}
	if test, err = NPYDataset(arrays["x_test"], arrays["y_test"], classes); err != nil {
		return nil, nil, fmt.Errorf("%w (x_test.npy, y_test.npy in %s)", err, dir)
	}
	train.Name, test.Name = "npy "+dir+" train", "npy "+dir+" test"
	return train, test, nil
}
