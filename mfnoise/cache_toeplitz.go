package mfnoise

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

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
	if c == nil || c.Dir == "" {
		t, err := build(ctx)
		return t, false, err
	}
	path, kb, err := c.entry(key, ".json")
	if err != nil {
		return nil, false, err
	}
	t, err := readToeplitzEntry(path, string(kb))
	if err == nil {
		return t, true, nil
	}
	if _, serr := os.Stat(path); serr == nil {
		buildTraceFrom(ctx).rebuilding(path, err)
	}
	t, err = build(ctx)
	if err != nil {
		return nil, false, err
	}
	payload, err := json.Marshal(storedToeplitz{Key: string(kb), Name: t.Name, N: t.N, Coef: t.Coef, BLT: t.BLT, InvCoef: t.InvCoef})
	if err != nil {
		return t, false, fmt.Errorf("mfnoise: cache: %w", err)
	}
	return t, false, c.write(path, toeplitzStoreMagic, toeplitzStoreVersion, payload)
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
