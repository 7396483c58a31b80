package data

import (
	"encoding/binary"
	"hash"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// HashExamples writes examples [lo, hi) of d to h in one fixed encoding:
// each example's features as little-endian float32 bits (the one float
// codec, atomicfile.FloatBytes), then its label as a little-endian
// uint64, then, when d has owners, its owner id as a little-endian uint64. Two sets hash alike exactly when those examples,
// labels and owners are bit-identical and in the same order: it is what a
// digest of training data hashes (a distributed worker's shard, the
// training set a checkpoint belongs to). Shape, classes and the count are
// the caller's to hash.
//
// A digest of private data is itself a function of it, not covered by any
// privacy guarantee (anyone who knows all but one example can test guesses
// of the last one against it): keep it as private as the data, or key the
// hash with a secret the data's holder keeps.
func (d *Dataset) HashExamples(h hash.Hash, lo, hi int) {
	per := d.Shape.Size()
	var buf []byte
	for i := lo; i < hi; i++ {
		h.Write(atomicfile.FloatBytes(d.X[i*per : (i+1)*per]))
		buf = binary.LittleEndian.AppendUint64(buf[:0], uint64(d.Y[i]))
		if d.Owners != nil {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(d.Owners[i]))
		}
		h.Write(buf)
	}
}
