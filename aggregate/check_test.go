package aggregate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCorruptStore flips bytes 5000-9000 of a small store (issue 28 item
// 3: bbolt then panicked at open with "Page expected to be: 2, but self
// identifies as ..."): CheckStore, StoredMechanism and Open must each
// return one error wrapping ErrStoreCorrupt that names the file, and never
// panic. An intact store passes the check.
func TestCorruptStore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	cfg := setup{mech: "tree-online", n: 8, d: 3, k: 1, b: 1}.config(t)
	a := open(t, path, cfg)
	for i := range 20 {
		if _, err := a.Add(context.Background(), fmt.Sprint("u", i), []float64{1, 2, 3}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := CheckStore(path); err != nil {
		t.Fatalf("intact store: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 9000 {
		t.Fatalf("store of %d bytes: too small for the test", len(b))
	}
	for i := 5000; i < 9000; i++ {
		b[i] ^= 0xa5
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	check := func(what string, f func() error) {
		t.Helper()
		var err error
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s panicked: %v", what, r)
				}
			}()
			err = f()
		}()
		if !errors.Is(err, ErrStoreCorrupt) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line wrapping ErrStoreCorrupt naming %s", what, err, path)
		}
	}
	check("CheckStore", func() error { return CheckStore(path) })
	check("StoredMechanism", func() error { _, err := StoredMechanism(path, cfg.Mechanism.Schema()); return err })
	check("Open", func() error {
		a, err := Open(context.Background(), path, cfg)
		if err == nil {
			a.Close()
		}
		return err
	})
}
