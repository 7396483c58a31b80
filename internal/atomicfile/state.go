package atomicfile

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// The state codec. Every persisted state (files, and the states a
// checkpoint or a store holds: model, optimizer, sampler, noise source)
// is one value encoded with MessagePack inside the checksummed envelope
// (Seal): the envelope says what it is (magic) and in which format
// version, and its SHA-256 catches any flipped bit before the payload is
// decoded. Float buffers inside are byte strings of little-endian IEEE
// values (AppendFloats, ReadFloats), so a restore is bit for bit.

// MarshalState encodes v and seals it as a state of kind magic, format
// version.
func MarshalState(magic string, version int, v any) ([]byte, error) {
	payload, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("atomicfile: %s: %w", magic, err)
	}
	return Seal(magic, version, payload)
}

// UnmarshalState opens a state made by MarshalState (Open) and decodes it
// into v (Unmarshal: every declared length checked first). Errors wrap
// ErrCorrupt and are one line.
func UnmarshalState(blob []byte, magic string, version int, v any) error {
	payload, err := Open(blob, magic, version)
	if err != nil {
		return err
	}
	return Unmarshal(payload, v)
}

// WriteState atomically replaces path with v as a state (MarshalState,
// WriteFile).
func WriteState(path, magic string, version int, v any) error {
	b, err := MarshalState(magic, version, v)
	if err != nil {
		return err
	}
	return WriteFile(path, b)
}

// ReadState reads a file written by WriteState into v. A missing file
// gives an error wrapping fs.ErrNotExist.
func ReadState(path, magic string, version int, v any) error {
	payload, err := ReadSealed(path, magic, version)
	if err != nil {
		return err
	}
	if err := Unmarshal(payload, v); err != nil {
		if ce, ok := err.(*CorruptError); ok {
			return &CorruptError{Reason: ce.Reason, Path: path}
		}
		return err
	}
	return nil
}
