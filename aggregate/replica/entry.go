package replica

import (
	"encoding/binary"
	"errors"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// encodeEntry is a contribution in the log: the id's length (uint16), the
// id, the vector (float64 little-endian).
func encodeEntry(contributor string, vec []float64) []byte {
	b := binary.LittleEndian.AppendUint16(make([]byte, 0, 2+len(contributor)+8*len(vec)), uint16(len(contributor)))
	return atomicfile.AppendFloats(append(b, contributor...), vec)
}

func decodeEntry(b []byte) (string, []float64, error) {
	if len(b) < 2 {
		return "", nil, errors.New("short log entry")
	}
	n := int(binary.LittleEndian.Uint16(b))
	if len(b) < 2+n || (len(b)-2-n)%8 != 0 {
		return "", nil, errors.New("malformed log entry")
	}
	id, rest := string(b[2:2+n]), b[2+n:]
	vec, err := atomicfile.DecodeFloats[float64](rest, len(rest)/8)
	return id, vec, err
}
