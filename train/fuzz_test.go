package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// writeCorpus stores b as a seed of the fuzz target in testdata/fuzz, when
// DPMF_WRITE_FUZZ_CORPUS is set (go test -run Fuzz with it set refreshes
// the committed seeds).
func writeCorpus(t testing.TB, target, name string, b []byte) {
	if os.Getenv("DPMF_WRITE_FUZZ_CORPUS") == "" {
		return
	}
	dir := filepath.Join("testdata", "fuzz", target)
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name), fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// FuzzLoadCheckpoint feeds arbitrary bytes to the checkpoint reader of a
// configured run: it must refuse them with an error, never panic, and a
// checkpoint it accepts must let the run go on.
func FuzzLoadCheckpoint(f *testing.F) {
	dir := f.TempDir()
	cfg := killConfig(f, dir, 12)
	if _, err := Run(context.Background(), cfg); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(cfg.Output.CheckpointPath)
	if err != nil {
		f.Fatal(err)
	}
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 1
	for name, b := range map[string][]byte{"good": good, "truncated": good[:len(good)/2], "flipped": flipped, "empty": {}} {
		f.Add(b)
		writeCorpus(f, "FuzzLoadCheckpoint", name, b)
	}
	cfg.Output.CheckpointPath, cfg.Output.MetricsPath = "", ""
	tr, err := New(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	path := filepath.Join(dir, "fuzz.ckpt")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		// The early comparison of the recorded settings reads the same
		// bytes first: it too must refuse, never panic.
		if err := tr.checkResume(path, &tr.cfg); err != nil && errors.Is(err, os.ErrNotExist) {
			t.Fatalf("settings check: error %v claims a missing file", err)
		}
		err := tr.loadCheckpoint(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				t.Fatalf("error %v claims a missing file", err)
			}
			return
		}
		if tr.Step() < 0 || tr.Step() > cfg.Privacy.Steps {
			t.Fatalf("accepted a checkpoint at step %d of %d", tr.Step(), cfg.Privacy.Steps)
		}
	})
}
