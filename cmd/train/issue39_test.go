package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 39 item 5: two output flags naming one file are refused before
// any work, whatever the spelling (relative, through a symbolic link);
// an input named as an output too. Before the fix -checkpoint X
// -save-model X trained and replaced the checkpoint with the model (seen
// failing: exit 0).
func TestCollidingOutputPathsRefused(t *testing.T) {
	dir := t.TempDir()
	x := filepath.Join(dir, "x")
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "cfg.json")
	os.WriteFile(cfg, []byte(`{"steps": 4}`), 0o644)
	for _, c := range []struct {
		a    []string
		want string
	}{
		{[]string{"-checkpoint", x, "-save-model", x}, "-checkpoint and -save-model name the same file"},
		{[]string{"-metrics", x, "-json", x}, "-metrics and -json name the same file"},
		{[]string{"-json", x + ".png", "-plot", filepath.Join(link, "x.png")}, "-json and -plot name the same file"},
		{[]string{"-config", cfg, "-json", cfg}, "-config and -json name the same file"},
	} {
		code, stdout, stderr := runCLI(t, args(c.a...)...)
		what := strings.Join(c.a, " ")
		checkOneLine(t, what, code, stderr)
		if code != exitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q: want %q before the data is loaded", what, code, stderr, stdout, c.want)
		}
		for _, f := range []string{x, x + ".png"} {
			if _, err := os.Stat(f); err == nil {
				t.Fatalf("%s: %s was written", what, f)
			}
		}
	}
	if b, _ := os.ReadFile(cfg); string(b) != `{"steps": 4}` {
		t.Fatalf("-config file changed: %q", b)
	}
	// Distinct files stay accepted.
	if code, _, stderr := runCLI(t, args("-metrics", filepath.Join(dir, "m"), "-json", filepath.Join(dir, "j"))...); code != 0 {
		t.Fatalf("distinct outputs: exit %d: %s", code, stderr)
	}
}
