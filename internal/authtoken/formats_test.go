package authtoken

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFormatKeyAndToken3258d09: a key file written by WriteKeyFile at
// commit 3258d09 loads, and the tokens minted with it then (a contributor
// "alice" and an operator, both expiring at Unix time 2000000000) verify
// to their claims.
func TestFormatKeyAndToken3258d09(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "formats", "key-3258d09.hex"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, b, 0o600); err != nil { // git keeps no 0600
		t.Fatal(err)
	}
	k, err := LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := os.ReadFile(filepath.Join("testdata", "formats", "tokens-3258d09.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Claims{{Role: Contributor, Subject: "alice", Expires: 2000000000}, {Role: Operator, Expires: 2000000000}}
	lines := strings.Fields(string(tb))
	if len(lines) != len(want) {
		t.Fatalf("%d tokens, want %d", len(lines), len(want))
	}
	for i, tok := range lines {
		c, err := k.Verify(tok, time.Unix(1900000000, 0))
		if err != nil {
			t.Fatal(err)
		}
		if c != want[i] {
			t.Fatalf("token %d: %+v, want %+v", i, c, want[i])
		}
	}
}
