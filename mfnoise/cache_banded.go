package mfnoise

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/vmihailenco/msgpack/v5"
)

// storedBanded is a cached banded encoder (bandmf above
// dpcore.DenseStepLimit steps): its band, n x Bands little-endian float64
// bytes, never a matrix.
type storedBanded struct {
	Key   []byte `msgpack:"key"`
	N     int    `msgpack:"n"`
	Bands int    `msgpack:"bands"`
	Band  []byte `msgpack:"band"`
}

// The kind and format version of a cached banded encoder's envelope. The
// kind differs from a dense factorization's, so a reader of either refuses
// the other by its header.
const (
	bandedStoreMagic   = "dpmf-banded-encoder"
	bandedStoreVersion = 1
	bandedStoreExt     = ".band.msgpack"
)

// getOrBuildBanded is Cache.GetOrBuild for banded encoders. The file is
// the msgpack payload in atomicfile's sealed envelope (kind
// dpmf-banded-encoder, SHA-256), written atomically; an entry with a bad
// checksum, another key or a band BandedEncoder.Validate refuses is
// rebuilt and overwritten.
func (c *Cache) getOrBuildBanded(ctx context.Context, key ProblemKey, build func(context.Context) (*BandedEncoder, error)) (*BandedEncoder, bool, error) {
	return getOrBuildSealed(ctx, c, key, bandedStoreExt, bandedStoreMagic, bandedStoreVersion, readBandedEntry, build,
		func(e *BandedEncoder, kb []byte) ([]byte, error) {
			if err := e.Validate(); err != nil {
				return nil, err
			}
			return msgpackBanded(e, kb...)
		})
}

func readBandedEntry(path string, key []byte) (*BandedEncoder, error) {
	payload, err := atomicfile.ReadSealed(path, bandedStoreMagic, bandedStoreVersion)
	if err != nil {
		if errors.Is(err, atomicfile.ErrCorrupt) {
			return nil, fmt.Errorf("mfnoise: cache: %w: %s fails its header or checksum", ErrCorrupt, path)
		}
		return nil, err
	}
	e, stored, err := decodeBanded(payload)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: cache: %s: %w", path, err)
	}
	if !bytes.Equal(stored, key) {
		return nil, fmt.Errorf("mfnoise: cache: %w: %s was stored under another key", ErrCorrupt, path)
	}
	return e, nil
}

// decodeBanded reads a storedBanded payload: the band's size is checked
// against its bytes before anything is allocated, and the band against
// BandedEncoder.Validate.
func decodeBanded(payload []byte) (*BandedEncoder, []byte, error) {
	var st storedBanded
	if err := atomicfile.Unmarshal(payload, &st); err != nil {
		return nil, nil, fmt.Errorf("%w: payload: %s", ErrCorrupt, atomicfile.Reason(err))
	}
	if st.N < 1 || st.Bands < 1 || st.Bands > st.N || len(st.Band)/8/st.Bands != st.N {
		return nil, nil, fmt.Errorf("%w: %d bytes of band for %d steps and %d bands", ErrCorrupt, len(st.Band), st.N, st.Bands)
	}
	band, err := atomicfile.DecodeFloats[float64](st.Band, st.N*st.Bands)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	e := &BandedEncoder{N: st.N, Bands: st.Bands, Band: band}
	if err := e.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return e, st.Key, nil
}

// msgpackBanded is the storedBanded payload of e under key.
func msgpackBanded(e *BandedEncoder, key ...byte) ([]byte, error) {
	return msgpack.Marshal(storedBanded{Key: key, N: e.N, Bands: e.Bands, Band: atomicfile.AppendFloats(nil, e.Band)})
}
