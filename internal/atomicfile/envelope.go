package atomicfile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrCorrupt is wrapped by Unseal for data that is not an intact envelope
// of the expected kind and version.
var ErrCorrupt = errors.New("corrupt file")

// Envelope is the on-disk record of a checksummed state file: a msgpack
// map of the file kind (Magic), the payload's format Version, the payload
// bytes and their SHA-256, so that any flipped bit is detected before the
// payload is trusted. Its field names are those of the factorization
// store's envelope (package mfnoise).
type Envelope struct {
	Magic   string `msgpack:"magic"`
	Version int    `msgpack:"version"`
	SHA256  []byte `msgpack:"sha256"`
	Payload []byte `msgpack:"payload"`
}

// Seal writes payload to w in an Envelope of the given kind and version.
// Pair it with Write for a crash-consistent file.
func Seal(w io.Writer, magic string, version int, payload []byte) error {
	sum := sha256.Sum256(payload)
	env := Envelope{Magic: magic, Version: version, SHA256: sum[:], Payload: payload}
	if err := msgpack.NewEncoder(w).Encode(&env); err != nil {
		return fmt.Errorf("atomicfile: seal %s: %w", magic, err)
	}
	return nil
}

// Unseal reads an Envelope from r and returns its payload once the kind,
// the version and the checksum are verified. Failures wrap ErrCorrupt (or
// with a one-line reason; the caller adds its prefix.
func Unseal(r io.Reader, magic string, version int) ([]byte, error) {
	var env Envelope
	if err := msgpack.NewDecoder(r).Decode(&env); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: truncated (%v)", ErrCorrupt, err)
		}
		return nil, fmt.Errorf("%w: not a %s file (%v)", ErrCorrupt, magic, err)
	}
	if env.Magic != magic {
		return nil, fmt.Errorf("%w: not a %s file (kind %q)", ErrCorrupt, magic, env.Magic)
	}
	if env.Version != version {
		return nil, fmt.Errorf("%w: %s format version %d, this build reads version %d", ErrCorrupt, magic, env.Version, version)
	}
	if sum := sha256.Sum256(env.Payload); !bytes.Equal(sum[:], env.SHA256) {
		return nil, fmt.Errorf("%w: SHA-256 checksum mismatch", ErrCorrupt)
	}
	return env.Payload, nil
}
