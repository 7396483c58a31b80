package atomicfile

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSealUnseal(t *testing.T) {
	payload := []byte("the payload \x00\xff")
	var b bytes.Buffer
	if err := Seal(&b, "kind", 3, payload); err != nil {
		t.Fatal(err)
	}
	blob := b.Bytes()
	got, err := Unseal(bytes.NewReader(blob), "kind", 3)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("Unseal = %q, %v", got, err)
	}
	// Every single-bit flip and every truncation is refused (the payload
	// sits inside the envelope, so a flip lands in a header, the checksum
	// or the payload).
	for i := range len(blob) * 8 {
		bad := bytes.Clone(blob)
		bad[i/8] ^= 1 << (i % 8)
		if p, err := Unseal(bytes.NewReader(bad), "kind", 3); err == nil {
			t.Fatalf("bit %d flipped: accepted %q", i, p)
		} else if !errors.Is(err, ErrCorrupt) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("bit %d flipped: error %q", i, err)
		}
	}
	for n := range len(blob) {
		if _, err := Unseal(bytes.NewReader(blob[:n]), "kind", 3); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: error %v", n, err)
		}
	}
	for _, c := range []struct {
		magic   string
		version int
		want    string
	}{{"other", 3, `not a other file (kind "kind")`}, {"kind", 4, "kind format version 3, this build reads version 4"}} {
		_, err := Unseal(bytes.NewReader(blob), c.magic, c.version)
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Unseal(%q, %d): %v, want %q", c.magic, c.version, err, c.want)
		}
	}
}
