package mfnoise

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"gonum.org/v1/gonum/mat"
)

// ErrCorrupt is wrapped by LoadFactorization errors for data that is not an
// intact stored factorization (bad format, checksum mismatch, inconsistent
// shapes, or A != BC).
var ErrCorrupt = errors.New("corrupt stored factorization")

const (
	storeMagic   = "dpmf-factorization"
	storeVersion = 1
	// maxStoredDim bounds the matrix dimensions accepted from a file, so a
	// corrupt header cannot ask for an absurd allocation.
	maxStoredDim = 1 << 16
)

// storedEnvelope is the outer msgpack record: the payload bytes and their
// SHA-256, so any flipped bit is detected before the payload is trusted.
type storedEnvelope struct {
	Magic   string `msgpack:"magic"`
	Version int    `msgpack:"version"`
	// Key is the canonical encoding of the ProblemKey the entry was stored
	// under by Cache (empty when written by SaveFactorization).
	Key     []byte `msgpack:"key"`
	SHA256  []byte `msgpack:"sha256"`
	Payload []byte `msgpack:"payload"`
}

// storedFactorization is the payload. Matrices are row-major little-endian
// float64 bytes: compact and bit-exact.
type storedFactorization struct {
	Workload Workload `msgpack:"workload"`
	Meta     Metadata `msgpack:"meta"`
	EncRows  int      `msgpack:"enc_rows"`
	EncCols  int      `msgpack:"enc_cols"`
	Encoder  []byte   `msgpack:"encoder"`
	DecRows  int      `msgpack:"dec_rows"`
	DecCols  int      `msgpack:"dec_cols"`
	Decoder  []byte   `msgpack:"decoder"`
}

// SaveFactorization writes f as msgpack: its workload, metadata (kind,
// schema, bands, stamps, loss, gap, lower bound, creation time), encoder and
// decoder, with a SHA-256 checksum over the payload.
func SaveFactorization(w io.Writer, f *Factorization) error {
	return saveFactorization(w, f, nil)
}

func saveFactorization(w io.Writer, f *Factorization, key []byte) error {
	if f == nil || f.Encoder == nil || f.Decoder == nil {
		return invalidf("save factorization: nil factorization or matrix")
	}
	p := storedFactorization{Workload: f.Workload, Meta: f.Meta}
	p.EncRows, p.EncCols = f.Encoder.Dims()
	p.DecRows, p.DecCols = f.Decoder.Dims()
	p.Encoder = denseBytes(f.Encoder)
	p.Decoder = denseBytes(f.Decoder)
	payload, err := msgpack.Marshal(&p)
	if err != nil {
		return fmt.Errorf("mfnoise: save factorization: %w", err)
	}
	sum := sha256.Sum256(payload)
	env := storedEnvelope{Magic: storeMagic, Version: storeVersion, Key: key, SHA256: sum[:], Payload: payload}
	if err := msgpack.NewEncoder(w).Encode(&env); err != nil {
		return fmt.Errorf("mfnoise: save factorization: %w", err)
	}
	return nil
}

// LoadFactorization reads a factorization written by SaveFactorization. It
// verifies the format, the checksum and the shapes, and re-checks A = BC
// through NewFactorization; failures wrap ErrCorrupt (or the I/O error).
func LoadFactorization(r io.Reader) (*Factorization, error) {
	f, _, err := loadFactorization(r)
	return f, err
}

func loadFactorization(r io.Reader) (*Factorization, []byte, error) {
	var env storedEnvelope
	if err := msgpack.NewDecoder(r).Decode(&env); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: truncated (%v)", ErrCorrupt, err)
		}
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: %v", ErrCorrupt, err)
	}
	if env.Magic != storeMagic {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: not a stored factorization (magic %q)", ErrCorrupt, env.Magic)
	}
	if env.Version != storeVersion {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: format version %d, this build reads %d", ErrCorrupt, env.Version, storeVersion)
	}
	sum := sha256.Sum256(env.Payload)
	if !bytes.Equal(sum[:], env.SHA256) {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: SHA-256 checksum mismatch", ErrCorrupt)
	}
	var p storedFactorization
	if err := msgpack.Unmarshal(env.Payload, &p); err != nil {
		return nil, nil, fmt.Errorf("mfnoise: load factorization: %w: payload: %v", ErrCorrupt, err)
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
	return f, env.Key, nil
}

func denseBytes(m *mat.Dense) []byte {
	r, c := m.Dims()
	out := make([]byte, 0, 8*r*c)
	for i := 0; i < r; i++ {
		for _, v := range m.RawRowView(i) {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
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
	v := make([]float64, r*c)
	for i := range v {
		v[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
	}
	return mat.NewDense(r, c, v), nil
}
