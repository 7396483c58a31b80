package data

import (
	"bytes"
	"fmt"
	"io"
)

const (
	cifarPixels   = 3 * 32 * 32
	cifar10Record = 1 + cifarPixels
	cifar100Rec   = 2 + cifarPixels
)

// DecodeCIFAR10 reads records of the CIFAR-10 binary format (one label byte
// in [0,10), then 1024 red, 1024 green and 1024 blue bytes, rows in order),
// gzipped or not, into a Dataset of shape 3 x 32 x 32 scaled to [0,1].
func DecodeCIFAR10(r io.Reader) (*Dataset, error) {
	return decodeCIFAR(r, false, 0)
}

// DecodeCIFAR100 reads records of the CIFAR-100 binary format (a coarse
// label byte in [0,20), a fine label byte in [0,100), then the image as in
// CIFAR-10). Y holds the fine labels, Coarse the coarse ones.
func DecodeCIFAR100(r io.Reader) (*Dataset, error) {
	return decodeCIFAR(r, true, 0)
}

// decodeCIFAR decodes CIFAR records; sizeHint (0 if unknown) presizes the
// read buffer.
func decodeCIFAR(r io.Reader, hundred bool, sizeHint int) (*Dataset, error) {
	what, rec, classes := "cifar-10", cifar10Record, 10
	if hundred {
		what, rec, classes = "cifar-100", cifar100Rec, 100
	}
	br := bufioReader(r)
	rr, err := maybeGzip(br)
	if err != nil {
		return nil, fmt.Errorf("data: %s: %w", what, err)
	}
	var buf bytes.Buffer
	if sizeHint > 0 && sizeHint <= maxFileBytes {
		buf.Grow(sizeHint + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(io.LimitReader(rr, maxFileBytes+1)); err != nil {
		// Read errors here come from gzip/flate: corrupt or truncated input.
		return nil, fmt.Errorf("data: %w: %s: %w", ErrFormat, what, err)
	}
	raw := buf.Bytes()
	switch {
	case len(raw) > maxFileBytes:
		return nil, formatf("%s: oversized: more than %d bytes", what, maxFileBytes)
	case len(raw) == 0:
		return nil, formatf("%s: empty file", what)
	case len(raw)%rec != 0 && len(raw)%(cifar10Record+cifar100Rec-rec) == 0:
		other := map[bool]string{false: "cifar-100", true: "cifar-10"}[hundred]
		return nil, formatf("%s: %d bytes are whole %d-byte records of %s, not %d-byte records of %s", what, len(raw), cifar10Record+cifar100Rec-rec, other, rec, what)
	case len(raw)%rec != 0:
		return nil, formatf("%s: %d bytes is not a whole number of %d-byte records (truncated or not %s)", what, len(raw), rec, what)
	}
	n := len(raw) / rec
	d := &Dataset{X: make([]float32, n*cifarPixels), Y: make([]int, n), Shape: cifarShape, Classes: classes}
	if hundred {
		d.Coarse, d.CoarseClasses = make([]int, n), 20
	}
	for i := 0; i < n; i++ {
		b := raw[i*rec : (i+1)*rec]
		if hundred {
			if b[0] >= 20 || b[1] >= 100 {
				return nil, formatf("%s: record %d has labels (coarse %d, fine %d), want < 20 and < 100", what, i, b[0], b[1])
			}
			d.Coarse[i] = int(b[0])
			b = b[1:]
		} else if b[0] >= 10 {
			return nil, formatf("%s: record %d has label %d, want < 10", what, i, b[0])
		}
		d.Y[i] = int(b[0])
		x := d.X[i*cifarPixels : (i+1)*cifarPixels]
		for k, p := range b[1:] {
			x[k] = byteScale[p]
		}
	}
	return d, nil
}
