package atomicfile

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/vmihailenco/msgpack/v5"
)

// floatBlock is how many values the float streams encode at a time.
const floatBlock = 1 << 14

// WriteSealedFloats is WriteSealed(path, magic, version,
// AppendFloats(nil, x)), byte for byte, without holding the encoded
// payload or the envelope in memory: for buffers of a gigabyte, which the
// copies would triple. The values are encoded twice, once for the
// checksum and once for the file.
func WriteSealedFloats[T Float](path, magic string, version int, x []T) error {
	h := sha256.New()
	if err := streamFloats(h, x); err != nil {
		return err
	}
	env := streamEnvelope[T]{Magic: magic, Version: version, SHA256: h.Sum(nil), Payload: floatPayload[T]{x}}
	return Write(path, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		if err := msgpack.NewEncoder(bw).Encode(&env); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// streamEnvelope is envelope with a payload encoded as it is written; its
// fields are envelope's, in the same order, so the bytes are Seal's.
type streamEnvelope[T Float] struct {
	Magic   string          `msgpack:"magic"`
	Version int             `msgpack:"version"`
	SHA256  []byte          `msgpack:"sha256"`
	Payload floatPayload[T] `msgpack:"payload"`
}

// floatPayload encodes as the msgpack binary AppendFloats(nil, x).
type floatPayload[T Float] struct{ x []T }

func (p floatPayload[T]) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeBytesLen(FloatSize[T]() * len(p.x)); err != nil {
		return err
	}
	return streamFloats(e.Writer(), p.x)
}

// streamFloats writes AppendFloats(nil, x) to w a block at a time.
func streamFloats[T Float](w io.Writer, x []T) error {
	buf := make([]byte, 0, FloatSize[T]()*min(len(x), floatBlock))
	for len(x) > 0 {
		k := min(len(x), floatBlock)
		buf = AppendFloats(buf[:0], x[:k])
		if _, err := w.Write(buf); err != nil {
			return err
		}
		x = x[k:]
	}
	return nil
}

// ReadSealedFloats reads a file written by WriteSealed (or
// WriteSealedFloats) whose payload is AppendFloats's encoding of exactly
// len(dst) values into dst, decoding as it reads: no copy of the file or
// the payload is held. A missing file gives an error wrapping
// fs.ErrNotExist; a file that is not an intact envelope of the kind and
// version, or whose payload holds another number of values, one wrapping
// ErrCorrupt (dst then holds no meaningful values).
func ReadSealedFloats[T Float](path, magic string, version int, dst []T) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	err = readSealedFloats(bufio.NewReaderSize(f, 1<<20), magic, version, dst)
	if ce, ok := err.(*CorruptError); ok {
		return &CorruptError{Reason: ce.Reason, Path: path}
	}
	if err != nil {
		return fmt.Errorf("atomicfile: %w (%s)", err, path)
	}
	return nil
}

func readSealedFloats[T Float](r *bufio.Reader, magic string, version int, dst []T) error {
	d := msgpack.NewDecoder(r)
	truncated := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return corruptf("truncated (%v)", err)
		}
		return corruptf("not a %s file (%v)", magic, err)
	}
	n, err := d.DecodeMapLen()
	if err != nil {
		return truncated(err)
	}
	var (
		kind     string
		v        = -1
		sum      []byte
		got      hash.Hash
		haveData bool
	)
	for range max(n, 0) {
		key, err := d.DecodeString()
		if err != nil {
			return truncated(err)
		}
		switch key {
		case "magic":
			kind, err = d.DecodeString()
		case "version":
			v, err = d.DecodeInt()
		case "sha256":
			sum, err = d.DecodeBytes()
		case "payload":
			if kind != magic {
				// Checked before the payload is read into dst.
				return corruptf("not a %s file (kind %q)", magic, kind)
			}
			var size int
			if size, err = d.DecodeBytesLen(); err != nil {
				break
			}
			if size != FloatSize[T]()*len(dst) {
				return corruptf("payload of %d bytes, want %d float values of %d bytes", size, len(dst), FloatSize[T]())
			}
			got, err = readFloats(d, dst)
			haveData = true
		default:
			err = d.Skip()
		}
		if err != nil {
			return truncated(err)
		}
	}
	if _, err := r.ReadByte(); err == nil {
		return corruptf("not a %s file (bytes after the end of its envelope)", magic)
	}
	switch {
	case kind != magic:
		return corruptf("not a %s file (kind %q)", magic, kind)
	case !haveData:
		return corruptf("not a %s file (no payload)", magic)
	case v != version:
		return corruptf("%s format version %d, this build reads version %d", magic, v, version)
	case string(got.Sum(nil)) != string(sum):
		return corruptf("SHA-256 checksum mismatch")
	}
	return nil
}

// readFloats fills dst from d's stream, a block at a time, and returns the
// SHA-256 of the bytes read.
func readFloats[T Float](d *msgpack.Decoder, dst []T) (hash.Hash, error) {
	h := sha256.New()
	size := FloatSize[T]()
	buf := make([]byte, size*min(len(dst), floatBlock))
	for len(dst) > 0 {
		k := min(len(dst), floatBlock)
		b := buf[:size*k]
		if err := d.ReadFull(b); err != nil {
			return nil, err
		}
		h.Write(b)
		if _, err := ReadFloats(dst[:k], b); err != nil {
			return nil, err
		}
		dst = dst[k:]
	}
	return h, nil
}
