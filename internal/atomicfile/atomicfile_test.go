package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesOrLeavesOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteFile(path, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("content %q", b)
	}
	// A failing writer leaves the old file and no temporary behind.
	boom := errors.New("boom")
	err := Write(path, func(w io.Writer) error { w.Write([]byte("half")); return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("error %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new" {
		t.Fatalf("failed write changed the file to %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("temporary left behind: %v", ents)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
}

func TestCheckWritable(t *testing.T) {
	dir := t.TempDir()
	fresh := filepath.Join(dir, "new.json")
	if err := CheckWritable(fresh); err != nil {
		t.Fatalf("new file in a writable directory: %v", err)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("CheckWritable created the file")
	}
	existing := filepath.Join(dir, "old")
	os.WriteFile(existing, []byte("keep"), 0o644)
	if err := CheckWritable(existing); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep" {
		t.Fatalf("CheckWritable changed the file to %q", b)
	}
	for _, bad := range []string{filepath.Join(dir, "missing", "f"), dir, ""} {
		if err := CheckWritable(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left files behind: %v", ents)
	}
}
