package mfnoise

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// ProblemKey identifies an optimization problem whose answer a Cache stores:
// the mechanism kind ("mf-single", "mf-kb", "bandmf", ...), the workload with
// its parameters (n, momentum, schedule), the participation schema, the band
// and stamp counts, and the requested gap.
type ProblemKey struct {
	Kind     string          `json:"kind"`
	Workload dpcore.Workload `json:"workload"`
	Schema   dpcore.Schema   `json:"schema"`
	Bands    int             `json:"bands"`
	Stamps   int             `json:"stamps"`
	Gap      float64         `json:"gap"`
}

// canonical is the byte string the key is hashed from and stored with.
func (k ProblemKey) canonical() ([]byte, error) {
	b, err := json.Marshal(k)
	if err != nil {
		return nil, fmt.Errorf("mfnoise: cache key: %w", err)
	}
	return append([]byte("dpmf-problem-key/v1 "), b...), nil
}

// Cache stores optimized factorizations in a directory, one file per
// ProblemKey, so an expensive optimization runs once. A nil *Cache or an
// empty Dir disables caching. Entries are written atomically (temporary
// file, fsync, rename), so concurrent users of one directory see either no
// entry or a complete one.
type Cache struct {
	Dir string
}

// Path returns the file that holds the entry for key.
func (c *Cache) Path(key ProblemKey) (string, error) {
	if c == nil || c.Dir == "" {
		return "", guard.Invalidf("cache: no directory")
	}
	kb, err := key.canonical()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(kb)
	kind := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, key.Kind)
	return filepath.Join(c.Dir, fmt.Sprintf("%s-n%d-%s.msgpack", kind, key.Workload.N, hex.EncodeToString(sum[:16]))), nil
}

// GetOrBuild returns the stored factorization for key, or calls build,
// stores its result and returns it; the bool reports whether it came from the
// cache. A stored entry is used only if it is intact (checksum, A = BC) and
// was stored under exactly this key; a corrupt or mismatched entry is rebuilt
// and overwritten. The built factorization must factor key.Workload.
// If the factorization was built but could not be stored, GetOrBuild returns
// it together with the storage error.
func (c *Cache) GetOrBuild(ctx context.Context, key ProblemKey, build func(context.Context) (*Factorization, error)) (*Factorization, bool, error) {
	if build == nil {
		return nil, false, guard.Invalidf("cache: nil build function")
	}
	if c == nil || c.Dir == "" {
		f, err := build(ctx)
		return f, false, err
	}
	path, kb, err := c.entry(key, ".msgpack")
	if err != nil {
		return nil, false, err
	}
	f, err := readEntry(path, kb)
	if err == nil {
		return f, true, nil
	}
	if _, serr := os.Stat(path); serr == nil {
		buildTraceFrom(ctx).rebuilding(path, err)
	}
	// Missing, corrupt, of another format version or mismatched: rebuild.
	f, err = build(ctx)
	if err != nil {
		return nil, false, err
	}
	if f == nil {
		return nil, false, fmt.Errorf("mfnoise: cache: build returned no factorization")
	}
	if !sameWorkload(f.Workload, key.Workload) {
		return nil, false, fmt.Errorf("mfnoise: cache: built factorization is for %v, key asks for %v", f.Workload, key.Workload)
	}
	payload, err := encodeFactorization(f, kb)
	if err != nil {
		return f, false, err
	}
	return f, false, c.write(path, storeMagic, storeVersion, payload)
}

// entry returns the file (Path, with extension ext) and the canonical key
// of key's entry.
func (c *Cache) entry(key ProblemKey, ext string) (string, []byte, error) {
	kb, err := key.canonical()
	if err != nil {
		return "", nil, err
	}
	path, err := c.Path(key)
	if err != nil {
		return "", nil, err
	}
	return strings.TrimSuffix(path, filepath.Ext(path)) + ext, kb, nil
}

// write stores payload at path in atomicfile's sealed envelope (kind magic,
// format version, SHA-256), atomically.
func (c *Cache) write(path, magic string, version int, payload []byte) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("mfnoise: cache: %w", err)
	}
	if err := atomicfile.WriteSealed(path, magic, version, payload); err != nil {
		return fmt.Errorf("mfnoise: cache: %w", err)
	}
	return nil
}

func sameWorkload(a, b dpcore.Workload) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

// readEntry reads the factorization stored at path under key. Any error
// (a missing file, another format version, a bad checksum, another key)
// makes the caller rebuild.
func readEntry(path string, key []byte) (*Factorization, error) {
	payload, err := atomicfile.ReadSealed(path, storeMagic, storeVersion)
	if err != nil {
		return nil, err
	}
	f, stored, err := decodeFactorization(payload)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(stored, key) {
		return nil, fmt.Errorf("mfnoise: cache: %w: entry %s was stored under another key", ErrCorrupt, path)
	}
	return f, nil
}

// storedToeplitz is a cached optimized Toeplitz mechanism: its
// coefficients (a few numbers for a BLT, p for p bands), never a matrix.
type storedToeplitz struct {
	Key     string              `json:"key"`
	Name    string              `json:"name"`
	N       int                 `json:"n"`
	Coef    []float64           `json:"coef,omitempty"`
	BLT     *toeplitz.BLTParams `json:"blt,omitempty"`
	InvCoef []float64           `json:"inv_coef,omitempty"`
}

// The kind and format version of a cached Toeplitz mechanism's envelope.
const (
	toeplitzStoreMagic   = "dpmf-toeplitz"
	toeplitzStoreVersion = 1
)

// getOrBuildToeplitz is Cache.GetOrBuild for Toeplitz mechanisms. The file
// is the JSON payload in atomicfile's sealed envelope (kind dpmf-toeplitz,
// SHA-256), written atomically; an entry with a bad checksum, another key
// or coefficients the constructors refuse is rebuilt and overwritten.
func (c *Cache) getOrBuildToeplitz(ctx context.Context, key ProblemKey, build func(context.Context) (*toeplitz.Encoder, error)) (*toeplitz.Encoder, bool, error) {
	return getOrBuildSealed(ctx, c, key, ".json", toeplitzStoreMagic, toeplitzStoreVersion,
		func(path string, kb []byte) (*toeplitz.Encoder, error) { return readToeplitzEntry(path, string(kb)) },
		build,
		func(t *toeplitz.Encoder, kb []byte) ([]byte, error) {
			return json.Marshal(storedToeplitz{Key: string(kb), Name: t.Name, N: t.N, Coef: t.Coef, BLT: t.BLT, InvCoef: t.InvCoef})
		})
}

// getOrBuildSealed is the cache protocol of the structured entries
// (Toeplitz, banded): read the entry at key's path with extension ext,
// else build, encode and write it in atomicfile's sealed envelope (magic,
// version), reporting a rebuilt unreadable entry to the build trace.
func getOrBuildSealed[T any](ctx context.Context, c *Cache, key ProblemKey, ext, magic string, version int,
	read func(path string, kb []byte) (T, error), build func(context.Context) (T, error), encode func(v T, kb []byte) ([]byte, error)) (T, bool, error) {
	var zero T
	if c == nil || c.Dir == "" {
		v, err := build(ctx)
		return v, false, err
	}
	path, kb, err := c.entry(key, ext)
	if err != nil {
		return zero, false, err
	}
	v, err := read(path, kb)
	if err == nil {
		return v, true, nil
	}
	if _, serr := os.Stat(path); serr == nil {
		buildTraceFrom(ctx).rebuilding(path, err)
	}
	if v, err = build(ctx); err != nil {
		return zero, false, err
	}
	payload, err := encode(v, kb)
	if err != nil {
		return v, false, fmt.Errorf("mfnoise: cache: %w", err)
	}
	return v, false, c.write(path, magic, version, payload)
}

func readToeplitzEntry(path, key string) (*toeplitz.Encoder, error) {
	payload, err := atomicfile.ReadSealed(path, toeplitzStoreMagic, toeplitzStoreVersion)
	if err != nil {
		if errors.Is(err, atomicfile.ErrCorrupt) {
			return nil, fmt.Errorf("mfnoise: cache: %w: %s fails its header or checksum", ErrCorrupt, path)
		}
		return nil, err
	}
	var st storedToeplitz
	if err := json.Unmarshal(payload, &st); err != nil {
		return nil, fmt.Errorf("mfnoise: cache: %w: %v", ErrCorrupt, err)
	}
	if st.Key != key {
		return nil, fmt.Errorf("mfnoise: cache: %w: %s was stored under another key", ErrCorrupt, path)
	}
	switch {
	case st.BLT != nil:
		return toeplitz.NewBLT(st.Name, st.N, *st.BLT)
	case st.Coef != nil:
		return toeplitz.New(st.Name, st.N, st.Coef)
	}
	return nil, fmt.Errorf("mfnoise: cache: %w: %s holds no coefficients", ErrCorrupt, path)
}
