package atomicfile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrCorrupt is wrapped by ReadSealed and Open for data that is not an
// intact envelope of the expected kind and version.
var ErrCorrupt = errors.New("corrupt or foreign file")

// envelope is the checksummed envelope of a state file: what it is, the
// format version, and the payload with its SHA-256, so any flipped bit is
// caught before the payload is trusted.
type envelope struct {
	Magic   string `msgpack:"magic"`
	Version int    `msgpack:"version"`
	SHA256  []byte `msgpack:"sha256"`
	Payload []byte `msgpack:"payload"`
}

// Seal wraps payload in the envelope of kind magic and format version.
func Seal(magic string, version int, payload []byte) ([]byte, error) {
	sum := sha256.Sum256(payload)
	b, err := msgpack.Marshal(&envelope{Magic: magic, Version: version, SHA256: sum[:], Payload: payload})
	if err != nil {
		return nil, fmt.Errorf("atomicfile: seal: %w", err)
	}
	return b, nil
}

// Open checks an envelope made by Seal and returns its payload; the error
// wraps ErrCorrupt when the kind, the version or the checksum is wrong.
func Open(blob []byte, magic string, version int) ([]byte, error) {
	var env envelope
	if err := msgpack.Unmarshal(blob, &env); err != nil {
		return nil, fmt.Errorf("atomicfile: %w: %v", ErrCorrupt, err)
	}
	if env.Magic != magic {
		return nil, fmt.Errorf("atomicfile: %w: a %q file, want %q", ErrCorrupt, env.Magic, magic)
	}
	if env.Version != version {
		return nil, fmt.Errorf("atomicfile: %w: %s version %d, want %d", ErrCorrupt, magic, env.Version, version)
	}
	if sum := sha256.Sum256(env.Payload); !bytes.Equal(sum[:], env.SHA256) {
		return nil, fmt.Errorf("atomicfile: %w: checksum mismatch", ErrCorrupt)
	}
	return env.Payload, nil
}

// WriteSealed atomically replaces path with payload in a checksummed
// envelope (Seal, WriteFile).
func WriteSealed(path, magic string, version int, payload []byte) error {
	b, err := Seal(magic, version, payload)
	if err != nil {
		return err
	}
	return WriteFile(path, b)
}

// ReadSealed reads a file written by WriteSealed and returns its payload.
// A missing file gives an error wrapping fs.ErrNotExist.
func ReadSealed(path, magic string, version int) ([]byte, error) {
	blob, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := Open(blob, magic, version)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return p, nil
}
