package models

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/vmihailenco/msgpack/v5"
)

// checkpoint is the on-disk form written by Save: a msgpack record whose
// Params are little-endian float32 bytes guarded by a CRC-32 (Castagnoli).
type checkpoint struct {
	Format  string `msgpack:"format"`
	Name    string `msgpack:"name"`
	Input   [3]int `msgpack:"input"`
	Classes int    `msgpack:"classes"`
	Layout  []ParamInfo
	Params  []byte `msgpack:"params"`
	CRC     uint32 `msgpack:"crc32c"`
}

const checkpointFormat = "dpmf-models-v1"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Save implements Model.
func (m *seq) Save(w io.Writer) error {
	buf := make([]byte, 4*len(m.params))
	for i, v := range m.params {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	ck := checkpoint{Format: checkpointFormat, Name: m.name, Input: m.in, Classes: m.classes,
		Layout: m.layout, Params: buf, CRC: crc32.Checksum(buf, castagnoli)}
	if err := msgpack.NewEncoder(w).Encode(&ck); err != nil {
		return fmt.Errorf("models: %s: save: %w", m.name, err)
	}
	return nil
}

// Load implements Model. It rejects checkpoints of another architecture or
// with a bad checksum, leaving the parameters unchanged.
func (m *seq) Load(r io.Reader) error {
	// The checkpoint holds 4 bytes per parameter and a small header; a
	// longer input is another file.
	limit := int64(4*len(m.params)) + 1<<16
	blob, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("models: %s: load: %w", m.name, err)
	}
	if int64(len(blob)) > limit {
		return dpcore.Invalid("models", "%s: load: larger than the %d bytes of a checkpoint of this model", m.name, limit)
	}
	var ck checkpoint
	if err := atomicfile.Unmarshal(blob, &ck); err != nil {
		return dpcore.Invalid("models", "%s: load: %s", m.name, atomicfile.Reason(err))
	}
	if ck.Format != checkpointFormat {
		return dpcore.Invalid("models", "%s: load: format %q", m.name, ck.Format)
	}
	if ck.Name != m.name || ck.Input != m.in || ck.Classes != m.classes || !sameLayout(ck.Layout, m.layout) {
		return dpcore.Invalid("models", "%s: load: checkpoint is for another architecture (%s %v)", m.name, ck.Name, ck.Input)
	}
	if len(ck.Params) != 4*len(m.params) {
		return dpcore.Invalid("models", "%s: load: %d parameter bytes, want %d", m.name, len(ck.Params), 4*len(m.params))
	}
	if crc32.Checksum(ck.Params, castagnoli) != ck.CRC {
		return dpcore.Invalid("models", "%s: load: checksum mismatch", m.name)
	}
	for i := range m.params {
		m.params[i] = math.Float32frombits(binary.LittleEndian.Uint32(ck.Params[4*i:]))
	}
	return nil
}

func sameLayout(a, b []ParamInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Offset != b[i].Offset || a[i].Len != b[i].Len ||
			!bytes.Equal(intsBytes(a[i].Shape), intsBytes(b[i].Shape)) {
			return false
		}
	}
	return true
}

func intsBytes(s []int) []byte {
	var b []byte
	for _, v := range s {
		b = binary.AppendVarint(b, int64(v))
	}
	return b
}
