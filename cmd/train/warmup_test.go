package main

import (
	"flag"
	"strings"
	"testing"
)

// -warmup W (config key "warmup") warms the learning rate up over W steps
// (train.Warmup); 0 is none, and what cannot run is refused with one line
// and exit 2 before the data is loaded.
func TestWarmupFlag(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var r runFlags
	r.register(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := applyConfig(fs, []byte(`{"warmup": 7}`)); err != nil {
		t.Fatal(err)
	}
	cfg, err := r.settings()
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Optimizer.Warmup; w == nil || w.Steps != 7 {
		t.Fatalf("config key warmup 7: Optimizer.Warmup = %+v", w)
	}
	r.warmup = 0
	if cfg, err = r.settings(); err != nil || cfg.Optimizer.Warmup != nil {
		t.Fatalf("-warmup 0: Optimizer.Warmup = %+v (%v), want none", cfg.Optimizer.Warmup, err)
	}
	for _, c := range []struct{ value, want string }{
		{"-1", "-warmup -1 must not be negative"},
		{"9", "warm-up of 9 steps is longer than the run's 2 steps"},
	} {
		code, stdout, stderr := runCLI(t, "run", "-data", "embedded", "-steps", "2", "-warmup", c.value)
		checkOneLine(t, "-warmup "+c.value, code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("-warmup %s: exit %d, stderr %q: want %q before the data is loaded", c.value, code, stderr, c.want)
		}
	}
	code, _, stderr := runCLI(t, args("-warmup", "2")...)
	if code != 0 {
		t.Fatalf("-warmup 2: exit %d: %s", code, stderr)
	}
}
