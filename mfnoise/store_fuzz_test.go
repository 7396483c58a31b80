package mfnoise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/vmihailenco/msgpack/v5"
)

// writeCorpus stores the fuzz seed (values: []byte and bool) in
// testdata/fuzz when DPMF_WRITE_FUZZ_CORPUS is set, so plain go test runs
// the committed seeds.
func writeCorpus(t testing.TB, target, name string, values ...any) {
	if os.Getenv("DPMF_WRITE_FUZZ_CORPUS") == "" {
		return
	}
	dir := filepath.Join("testdata", "fuzz", target)
	os.MkdirAll(dir, 0o755)
	text := []byte("go test fuzz v1\n")
	for _, v := range values {
		switch v := v.(type) {
		case []byte:
			text = fmt.Appendf(text, "[]byte(%q)\n", v)
		case bool:
			text = fmt.Appendf(text, "bool(%v)\n", v)
		default:
			t.Fatalf("corpus value of type %T", v)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
		t.Fatal(err)
	}
}

// v1Entry is a cache entry in format version 1, written by that code
// (see TestStoreFormatVersions).
func v1Entry(t testing.TB) []byte {
	b, err := os.ReadFile(filepath.Join("testdata", "store-v1", "cache-entry.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wrapPayload makes a valid envelope (magic, version, checksum) around an
// arbitrary payload, so the fuzzer reaches the payload decoding that the
// checksum otherwise shields.
func wrapPayload(t testing.TB, payload []byte) []byte {
	b, err := atomicfile.Seal(storeMagic, storeVersion, payload)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzLoadFactorization feeds arbitrary bytes to the reader of stored and
// cached factorizations, either as the whole file or (payload = true) as
// the checksummed payload inside a valid envelope. Every input must be
// refused with an ErrCorrupt error or give a factorization that satisfies
// its workload; none may panic or allocate beyond what the file holds.
func FuzzLoadFactorization(f *testing.F) {
	fac := smallOptimum(f, 6)
	var buf bytes.Buffer
	if err := SaveFactorization(&buf, fac); err != nil {
		f.Fatal(err)
	}
	good := buf.Bytes()
	payload, err := atomicfile.Open(good, storeMagic, storeVersion)
	if err != nil {
		f.Fatal(err)
	}
	seeds := []struct {
		name    string
		b       []byte
		payload bool
	}{
		{"good", good, false},
		{"truncated", good[:len(good)/2], false},
		{"payload", payload, true},
		{"payload-truncated", payload[:len(payload)-9], true},
		{"empty", nil, false},
		{"version1", v1Entry(f), false},
	}
	for _, s := range seeds {
		f.Add(s.b, s.payload)
		writeCorpus(f, "FuzzLoadFactorization", s.name, s.b, s.payload)
	}
	f.Fuzz(func(t *testing.T, b []byte, payload bool) {
		if payload {
			b = wrapPayload(t, b)
		}
		g, err := LoadFactorization(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if g.Workload.Validate() != nil {
			t.Fatalf("accepted an invalid workload %v", g.Workload)
		}
		if _, c := g.Encoder.Dims(); c != g.N() {
			t.Fatalf("encoder has %d columns for n = %d", c, g.N())
		}
	})
}

// FuzzCacheEntry puts arbitrary bytes where the cache keeps an entry: the
// cache must rebuild (never panic, never return a factorization for
// another problem).
func FuzzCacheEntry(f *testing.F) {
	dir := f.TempDir()
	c := &Cache{Dir: dir}
	w, err := dpcore.PrefixSum(6)
	if err != nil {
		f.Fatal(err)
	}
	key := ProblemKey{Kind: "mf-single", Workload: w, Schema: dpcore.SingleParticipation(), Stamps: 1}
	built := 0
	first, _, err := c.GetOrBuild(context.Background(), key, countingBuild(w, &built))
	if err != nil {
		f.Fatal(err)
	}
	// Rebuilding returns the first optimum: a fresh optimization on every
	// corrupt entry made the fuzzer crawl (a dozen executions in 15 s).
	build := func(context.Context) (*Factorization, error) { built++; return first, nil }
	path, err := c.Path(key)
	if err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	for name, b := range map[string][]byte{"good": good, "truncated": good[:len(good)-1], "version1": v1Entry(f), "empty": nil} {
		f.Add(b)
		writeCorpus(f, "FuzzCacheEntry", name, b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		g, hit, err := c.GetOrBuild(context.Background(), key, build)
		if err != nil {
			t.Fatal(err)
		}
		if !sameWorkload(g.Workload, w) {
			t.Fatalf("cache returned a factorization of %v for %v (hit %v)", g.Workload, w, hit)
		}
	})
}

// A checksummed entry whose workload claims more steps than its matrices
// hold is refused before the n x n workload matrix is built. (Found by
// FuzzLoadFactorization: before the fix, n = 2^20 with 6 x 6 matrices
// crashed with "fatal error: runtime: out of memory".)
func TestLoadRefusesWorkloadLargerThanItsMatrices(t *testing.T) {
	fac := smallOptimum(t, 6)
	var p storedFactorization
	p.Workload, p.Meta = fac.Workload, fac.Meta
	p.Workload.N = 1 << 20
	p.EncRows, p.EncCols = fac.Encoder.Dims()
	p.DecRows, p.DecCols = fac.Decoder.Dims()
	p.Encoder, p.Decoder = denseBytes(fac.Encoder), denseBytes(fac.Decoder)
	b, err := msgpack.Marshal(&p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFactorization(bytes.NewReader(wrapPayload(t, b))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("want ErrCorrupt, got %v", err)
	}
}
