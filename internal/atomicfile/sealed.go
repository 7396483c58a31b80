package atomicfile

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
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
// wraps ErrCorrupt, says in one line what is wrong (truncated, another
// kind of file, another format version, a checksum mismatch) and carries
// no package prefix of its own beyond "atomicfile: ".
func Open(blob []byte, magic string, version int) ([]byte, error) {
	var env envelope
	if err := checkLengths(blob); err != nil {
		return nil, corruptf("truncated or not a %s file (%s)", magic, Reason(err))
	}
	if err := msgpack.Unmarshal(blob, &env); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, corruptf("truncated (%v)", err)
		}
		return nil, corruptf("not a %s file (%v)", magic, err)
	}
	if env.Magic != magic {
		return nil, corruptf("not a %s file (kind %q)", magic, env.Magic)
	}
	if env.Version != version {
		return nil, corruptf("%s format version %d, this build reads version %d", magic, env.Version, version)
	}
	if sum := sha256.Sum256(env.Payload); !bytes.Equal(sum[:], env.SHA256) {
		return nil, corruptf("SHA-256 checksum mismatch")
	}
	return env.Payload, nil
}

// Unseal reads at most limit bytes from r and opens them as an envelope
// (Open); a longer input is refused rather than read into memory.
func Unseal(r io.Reader, magic string, version int, limit int64) ([]byte, error) {
	blob, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("atomicfile: %w", err)
	}
	if int64(len(blob)) > limit {
		return nil, corruptf("larger than %d bytes", limit)
	}
	return Open(blob, magic, version)
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
	if ce, ok := err.(*CorruptError); ok {
		return nil, &CorruptError{Reason: ce.Reason, Path: path}
	}
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return p, nil
}
