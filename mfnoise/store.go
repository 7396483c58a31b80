package mfnoise

import (
	"errors"
	"fmt"
	"io"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/vmihailenco/msgpack/v5"
	"gonum.org/v1/gonum/mat"
)

// ErrCorrupt is wrapped by LoadFactorization errors for data that is not an
// intact stored factorization (bad format, checksum mismatch, inconsistent
// shapes, or A != BC).
var ErrCorrupt = errors.New("corrupt stored factorization")

// The kind and format version of a stored factorization's envelope
// (atomicfile's sealed envelope: magic, version, SHA-256, payload). Version
// 2 moved the cache key into the payload; version 1 had an envelope of its
// own with the key beside the payload, and is still read.
const (
	storeMagic    = "dpmf-factorization"
	storeVersion  = 2
	storeVersion1 = 1
	// maxStoredDim bounds the matrix dimensions accepted from a file, so a
	// corrupt header cannot ask for an absurd allocation.
	maxStoredDim = 1 << 16
	// maxStoredBytes bounds what LoadFactorization reads: two matrices of
	// maxStoredDim x maxStoredDim float64 and their metadata.
	maxStoredBytes = 2*8*maxStoredDim*maxStoredDim + 1<<20
)

// storedFactorization is the payload. Matrices are row-major little-endian
// float64 bytes: compact and bit-exact.
type storedFactorization struct {
	// Key is the canonical encoding of the ProblemKey the entry was stored
	// under by Cache (empty when written by SaveFactorization).
	Key      []byte          `msgpack:"key,omitempty"`
	Workload dpcore.Workload `msgpack:"workload"`
	Meta     Metadata        `msgpack:"meta"`
	EncRows  int             `msgpack:"enc_rows"`
	EncCols  int             `msgpack:"enc_cols"`
	Encoder  []byte          `msgpack:"encoder"`
	DecRows  int             `msgpack:"dec_rows"`
	DecCols  int             `msgpack:"dec_cols"`
	Decoder  []byte          `msgpack:"decoder"`
}

// SaveFactorization writes f as msgpack: its workload, metadata (kind,
// schema, bands, stamps, loss, gap, lower bound, creation time), encoder and
// decoder, in a checksummed envelope (docs/files.md).
func SaveFactorization(w io.Writer, f *Factorization) error {
	return saveFactorization(w, f, nil)
}

func saveFactorization(w io.Writer, f *Factorization, key []byte) error {
	payload, err := encodeFactorization(f, key)
	if err != nil {
		return err
	}
	blob, err := atomicfile.Seal(storeMagic, storeVersion, payload)
	if err != nil {
		return fmt.Errorf("mfnoise: save factorization: %w", err)
	}
	if _, err := w.Write(blob); err != nil {
		return fmt.Errorf("mfnoise: save factorization: %w", err)
	}
	return nil
}

// encodeFactorization is the sealed payload of f stored under key.
func encodeFactorization(f *Factorization, key []byte) ([]byte, error) {
	if f == nil || f.Encoder == nil || f.Decoder == nil {
		return nil, guard.Invalidf("save factorization: nil factorization or matrix")
	}
	p := storedFactorization{Key: key, Workload: f.Workload, Meta: f.Meta}
	p.EncRows, p.EncCols = f.Encoder.Dims()
	p.DecRows, p.DecCols = f.Decoder.Dims()
	p.Encoder = denseBytes(f.Encoder)
	p.Decoder = denseBytes(f.Decoder)
	payload, err := msgpack.Marshal(&p)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: save factorization: %w", err)
	}
	return payload, nil
}

// LoadFactorization reads a factorization written by SaveFactorization
// (format version 2, or 1). It verifies the format, the checksum and the
// shapes, and re-checks A = BC through NewFactorization; failures wrap
// ErrCorrupt (or the I/O error).
func LoadFactorization(r io.Reader) (*Factorization, error) {
	blob, err := io.ReadAll(io.LimitReader(r, maxStoredBytes+1))
	if err != nil {
		return nil, fmt.Errorf("mfnoise: load factorization: %w", err)
	}
	if len(blob) > maxStoredBytes {
		return nil, fmt.Errorf("mfnoise: load factorization: %w: larger than %s", ErrCorrupt, dpcore.HumanBytes(maxStoredBytes))
	}
	// Version 1 (the key beside the payload, in an envelope of its own)
	// opens as the same envelope with the key ignored.
	version := storeVersion
	var head struct {
		Version int `msgpack:"version"`
	}
	if atomicfile.Unmarshal(blob, &head) == nil && head.Version == storeVersion1 {
		version = storeVersion1
	}
	payload, err := atomicfile.Open(blob, storeMagic, version)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: load factorization: %w: %s", ErrCorrupt, atomicfile.Reason(err))
	}
	f, _, err := decodeFactorization(payload)
	return f, err
}

// decodeFactorization reads a payload made by encodeFactorization and
// returns the factorization and the key it was stored under.
func decodeFactorization(payload []byte) (*Factorization, []byte, error) {
	var p storedFactorization
	if err := atomicfile.Unmarshal(payload, &p); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: payload: %s", ErrCorrupt, atomicfile.Reason(err))
	}
	c, err := bytesDense(p.EncRows, p.EncCols, p.Encoder)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: encoder: %v", ErrCorrupt, err)
	}
	b, err := bytesDense(p.DecRows, p.DecCols, p.Decoder)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: decoder: %v", ErrCorrupt, err)
	}
	// The workload's n must match the stored matrices before its n x n
	// matrix is built: a corrupt n would otherwise ask for any amount of
	// memory, where the matrices' sizes are bounded by the file's.
	if n := p.Workload.N; n != p.EncCols || n != p.DecRows || p.DecCols != p.EncRows {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: workload n = %d, encoder %d x %d, decoder %d x %d", ErrCorrupt, n, p.EncRows, p.EncCols, p.DecRows, p.DecCols)
	}
	f, err := NewFactorization(p.Workload, c, b, p.Meta)
	if err != nil {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: %v", ErrCorrupt, err)
	}
	return f, p.Key, nil
}

func denseBytes(m *mat.Dense) []byte {
	r, c := m.Dims()
	out := make([]byte, 0, 8*r*c)
	for i := 0; i < r; i++ {
		out = atomicfile.AppendFloats(out, m.RawRowView(i))
	}
	return out
}

func bytesDense(r, c int, data []byte) (*mat.Dense, error) {
	if r <= 0 || c <= 0 || r > maxStoredDim || c > maxStoredDim {
		return nil, fmt.Errorf("dimensions %d x %d", r, c)
	}
	if len(data) != 8*r*c {
		return nil, fmt.Errorf("%d bytes for a %d x %d matrix", len(data), r, c)
	}
	v, err := atomicfile.DecodeFloats[float64](data, r*c)
	if err != nil {
		return nil, err
	}
	return mat.NewDense(r, c, v), nil
}
