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
	return OpenVersions(blob, magic, version, version)
}

// OpenVersions is Open for a reader of several format versions: it
// accepts an envelope of kind magic with a version in [oldest, newest],
// and the version comes back with the payload (OpenAny).
func OpenVersions(blob []byte, magic string, oldest, newest int) ([]byte, error) {
	payload, v, err := OpenAny(blob, magic)
	if err != nil {
		return nil, err
	}
	if v < oldest || v > newest {
		reads := fmt.Sprintf("version %d", newest)
		if oldest != newest {
			reads = fmt.Sprintf("versions %d to %d", oldest, newest)
		}
		return nil, corruptf("%s format version %d, this build reads %s", magic, v, reads)
	}
	return payload, nil
}

// OpenAny checks an envelope of kind magic, whatever its version, and
// returns its payload and format version: the reader of a format with
// several versions dispatches on it.
func OpenAny(blob []byte, magic string) ([]byte, int, error) {
	var env envelope
	end, err := valueEnd(blob)
	if err != nil {
		return nil, 0, corruptf("truncated or not a %s file (%s)", magic, Reason(err))
	}
	if end != len(blob) {
		return nil, 0, corruptf("not a %s file (%d bytes after the end of its envelope)", magic, len(blob)-end)
	}
	if err := msgpack.Unmarshal(blob, &env); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, 0, corruptf("truncated (%v)", err)
		}
		return nil, 0, corruptf("not a %s file (%v)", magic, err)
	}
	if env.Magic != magic {
		return nil, 0, corruptf("not a %s file (kind %q)", magic, env.Magic)
	}
	if sum := sha256.Sum256(env.Payload); !bytes.Equal(sum[:], env.SHA256) {
		return nil, 0, corruptf("SHA-256 checksum mismatch")
	}
	return env.Payload, env.Version, nil
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
	return Options{}.WriteSealed(path, magic, version, payload)
}

// WriteSealed atomically replaces path with payload in a checksummed
// envelope (Seal, WriteFile).
func (o Options) WriteSealed(path, magic string, version int, payload []byte) error {
	b, err := Seal(magic, version, payload)
	if err != nil {
		return err
	}
	return o.WriteFile(path, b)
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
