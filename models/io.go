package models

import (
	"fmt"
	"hash/crc32"
	"io"
	"slices"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// state is what Save writes: the state codec of package atomicfile (kind
// stateMagic), a msgpack record whose Params are little-endian float32.
type state struct {
	Name    string      `msgpack:"name"`
	Input   [3]int      `msgpack:"input"`
	Classes int         `msgpack:"classes"`
	Layout  []ParamInfo `msgpack:"layout"`
	Params  []byte      `msgpack:"params"`
}

const (
	stateMagic   = "dpmf-model-state"
	stateVersion = 1
)

// legacyState is what Save wrote before the state codec (format
// "dpmf-models-v1", a bare msgpack record whose parameters a CRC-32C
// guards). Such states, inside checkpoints of earlier builds, still load.
type legacyState struct {
	Format  string `msgpack:"format"`
	Name    string `msgpack:"name"`
	Input   [3]int `msgpack:"input"`
	Classes int    `msgpack:"classes"`
	Layout  []ParamInfo
	Params  []byte `msgpack:"params"`
	CRC     uint32 `msgpack:"crc32c"`
}

const legacyFormat = "dpmf-models-v1"

// Save implements Model.
func (m *seq) Save(w io.Writer) error {
	b, err := atomicfile.MarshalState(stateMagic, stateVersion, &state{Name: m.name, Input: m.in, Classes: m.classes,
		Layout: m.layout, Params: atomicfile.AppendFloats(nil, m.params)})
	if err == nil {
		_, err = w.Write(b)
	}
	if err != nil {
		return fmt.Errorf("models: %s: save: %w", m.name, err)
	}
	return nil
}

// Load implements Model. It rejects states of another architecture or
// with a bad checksum, leaving the parameters unchanged.
func (m *seq) Load(r io.Reader) error {
	// The state holds 4 bytes per parameter and a small header; a longer
	// input is another file.
	limit := int64(4*len(m.params)) + 1<<16
	blob, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return fmt.Errorf("models: %s: load: %w", m.name, err)
	}
	if int64(len(blob)) > limit {
		return dpcore.Invalid("models", "%s: load: larger than the %d bytes of a checkpoint of this model", m.name, limit)
	}
	st, err := decodeState(blob)
	if err != nil {
		return dpcore.Invalid("models", "%s: load: %s", m.name, err)
	}
	if st.Name != m.name || st.Input != m.in || st.Classes != m.classes || !sameLayout(st.Layout, m.layout) {
		return dpcore.Invalid("models", "%s: load: checkpoint is for another architecture (%s %v)", m.name, st.Name, st.Input)
	}
	if len(st.Params) != 4*len(m.params) {
		return dpcore.Invalid("models", "%s: load: %d parameter bytes, want %d", m.name, len(st.Params), 4*len(m.params))
	}
	_, err = atomicfile.ReadFloats(m.params, st.Params)
	return err
}

// decodeState reads a state written by Save, or by the builds before the
// state codec (legacyState); the error is the reason alone.
func decodeState(blob []byte) (state, error) {
	var st state
	err := atomicfile.UnmarshalState(blob, stateMagic, stateVersion, &st)
	if err == nil {
		return st, nil
	}
	var old legacyState
	if atomicfile.Unmarshal(blob, &old) != nil || old.Format != legacyFormat {
		return st, fmt.Errorf("%s", atomicfile.Reason(err))
	}
	if crc32.Checksum(old.Params, crc32.MakeTable(crc32.Castagnoli)) != old.CRC {
		return st, fmt.Errorf("checksum mismatch")
	}
	return state{Name: old.Name, Input: old.Input, Classes: old.Classes, Layout: old.Layout, Params: old.Params}, nil
}

func sameLayout(a, b []ParamInfo) bool {
	return slices.EqualFunc(a, b, func(x, y ParamInfo) bool {
		return x.Name == y.Name && x.Offset == y.Offset && x.Len == y.Len && slices.Equal(x.Shape, y.Shape)
	})
}
