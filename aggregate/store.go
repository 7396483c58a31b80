package aggregate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// Store layout (one bbolt file). Every value is followed by a CRC-32C of
// its bytes, checked on read: bbolt checksums only its meta pages.
//
//	meta/config        JSON of the fields that determine the releases
//	meta/noise         the noise source's MarshalBinary state after the
//	                   last release (secret: it determines future noise);
//	                   with the exact arithmetic, noise.ExactRows's state
//	steps/<t>          exact arithmetic: the grid step sum of step t (D
//	                   int64) while a later encoder row reads it
//	encoded/<r>        exact arithmetic: encoded row Y_r (D int128) while a
//	                   later decoder row reads it
//	meta/open          released steps t (uint64), contributions in step t+1
//	                   (uint64), the open step's accumulator (D float64;
//	                   D int64 grid sums with the exact arithmetic)
//	meta/state         the workload state after step t (D float64: the
//	                   noisy prefix sum, or the momentum sum)
//	meta/counters      accepted, rejected, clipped (uint64 each)
//	meta/mechanism     the mechanism (privacy.EncodeStrategy, the factorization file format) and
//	meta/mechanism-name   its name, when the mechanism is one, so a restart
//	                   reuses it instead of re-optimizing (StoredMechanism)
//	contributors/<id>  the steps the contributor joined (uint32 each)
//	releases/<t>       release t (8-byte big-endian key): D float64, then
//	                   for Window the noisy prefix sum P_t (D float64)
//
// A batch of contributions updates meta/open, meta/counters and the
// contributors' records in one transaction; a release writes
// releases/<t>, meta/noise, meta/state, meta/open and meta/counters in one
// transaction. A crash therefore leaves either all or none of each.
var (
	bucketMeta         = []byte("meta")
	bucketContributors = []byte("contributors")
	bucketReleases     = []byte("releases")

	keyConfig   = []byte("config")
	keyNoise    = []byte("noise")
	keyOpen     = []byte("open")
	keyState    = []byte("state")
	keyCounters = []byte("counters")
	keyMechName = []byte("mechanism-name")
	keyMech     = []byte("mechanism")
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// errCorrupt is wrapped when a stored value fails its checksum or shape.
var errCorrupt = errors.New("store corrupt")

func seal(b []byte) []byte {
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
}

func unseal(what string, b []byte) ([]byte, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("aggregate: %s: %w: %d bytes", what, errCorrupt, len(b))
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, crcTable) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("aggregate: %s: %w: checksum mismatch", what, errCorrupt)
	}
	return body, nil
}

func appendFloats(b []byte, x []float64) []byte { return atomicfile.AppendFloats(b, x) }

// readFloats fills dst from b, whose length the caller has checked.
func readFloats(dst []float64, b []byte) []byte {
	rest, _ := atomicfile.ReadFloats(dst, b)
	return rest
}

func stepKey(t int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t)) }

type openRecord struct {
	released int
	count    int
	acc      []float64 // float path
	acci     []int64   // exact path: the step sum on the grid
}

func newOpen(released, dim int, exact bool) openRecord {
	if exact {
		return openRecord{released: released, acci: make([]int64, dim)}
	}
	return openRecord{released: released, acc: make([]float64, dim)}
}

func (o *openRecord) encode() []byte {
	b := make([]byte, 0, 16+8*max(len(o.acc), len(o.acci))+4)
	b = binary.LittleEndian.AppendUint64(b, uint64(o.released))
	b = binary.LittleEndian.AppendUint64(b, uint64(o.count))
	if o.acci != nil {
		return seal(appendInts(b, o.acci))
	}
	return seal(appendFloats(b, o.acc))
}

func decodeOpen(v []byte, dim int, exact bool) (openRecord, error) {
	body, err := unseal("open step", v)
	if err != nil {
		return openRecord{}, err
	}
	if len(body) != 16+8*dim {
		return openRecord{}, fmt.Errorf("aggregate: open step: %w: %d bytes for dimension %d", errCorrupt, len(body), dim)
	}
	o := newOpen(int(binary.LittleEndian.Uint64(body)), dim, exact)
	o.count = int(binary.LittleEndian.Uint64(body[8:]))
	if exact {
		for i := range o.acci {
			o.acci[i] = int64(binary.LittleEndian.Uint64(body[16+8*i:]))
		}
	} else {
		readFloats(o.acc, body[16:])
	}
	return o, nil
}

func encodeVec(x []float64) []byte { return seal(appendFloats(make([]byte, 0, 8*len(x)+4), x)) }

func decodeVec(what string, v []byte, dst []float64) error {
	body, err := unseal(what, v)
	if err != nil {
		return err
	}
	if len(body) != 8*len(dst) {
		return fmt.Errorf("aggregate: %s: %w: %d bytes, want %d", what, errCorrupt, len(body), 8*len(dst))
	}
	readFloats(dst, body)
	return nil
}

type counters struct{ accepted, rejected, clipped uint64 }

func (c counters) encode() []byte {
	b := binary.LittleEndian.AppendUint64(nil, c.accepted)
	b = binary.LittleEndian.AppendUint64(b, c.rejected)
	return seal(binary.LittleEndian.AppendUint64(b, c.clipped))
}

func decodeCounters(v []byte) (counters, error) {
	body, err := unseal("counters", v)
	if err != nil {
		return counters{}, err
	}
	if len(body) != 24 {
		return counters{}, fmt.Errorf("aggregate: counters: %w", errCorrupt)
	}
	return counters{binary.LittleEndian.Uint64(body), binary.LittleEndian.Uint64(body[8:]), binary.LittleEndian.Uint64(body[16:])}, nil
}

func encodeSteps(steps []int) []byte {
	b := make([]byte, 0, 4*len(steps)+4)
	for _, s := range steps {
		b = binary.LittleEndian.AppendUint32(b, uint32(s))
	}
	return seal(b)
}

func decodeSteps(v []byte) ([]int, error) {
	body, err := unseal("participation record", v)
	if err != nil {
		return nil, err
	}
	if len(body)%4 != 0 {
		return nil, fmt.Errorf("aggregate: participation record: %w", errCorrupt)
	}
	s := make([]int, len(body)/4)
	for i := range s {
		s[i] = int(binary.LittleEndian.Uint32(body[4*i:]))
	}
	return s, nil
}
