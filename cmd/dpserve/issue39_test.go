package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runLines runs dpserve in-process and returns its exit status and its
// standard error.
func runLines(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := run(ctx, args, io.Discard, &stderr)
	return code, stderr.String()
}

// Issue 39 item 7: every unusable store exits 2 with one line saying what
// is wrong; a store merely locked by a running dpserve is not called
// corrupt (no advice to move it aside, which would start a new privacy
// budget). Before the fix the lock got the restore advice and the empty,
// cut-short and text files exited 1 ("bad file descriptor", "file size
// too small", "invalid database"); seen failing.
func TestUnusableStoresExitTwo(t *testing.T) {
	dir := t.TempDir()
	base := func(store string) []string {
		return []string{"-store", store, "-dim", "2", "-epsilon", "1", "-delta", "1e-6", "-horizon", "4", "-clip", "1", "-addr", "127.0.0.1:0"}
	}
	store := filepath.Join(dir, "s.db")
	o, err := parseFlags(base(store), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := openAggregator(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agg.Add(context.Background(), "u", []float64{1, 0}); err != nil {
		t.Fatal(err)
	}
	// Held open: another process (here another open file) cannot lock it.
	code, line := runLines(t, base(store)...)
	if code != 2 || !strings.Contains(line, "locked by another process") || strings.Contains(line, "new privacy budget") ||
		strings.Count(line, "\n") != 1 {
		t.Errorf("locked store: exit %d, %q; want 2 and one line saying it is locked, without the restore advice", code, line)
	}
	agg.Close()
	full, err := os.ReadFile(store)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		content []byte
		want    string
	}{
		{"empty", nil, "empty (0 bytes)"},
		{"cut short", full[:5000], "cut short"},
		{"text", []byte("hello\n"), "not a bbolt file"},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".db")
		os.WriteFile(p, c.content, 0o600)
		code, line := runLines(t, base(p)...)
		t.Logf("%s: exit %d: %s", c.name, code, line)
		if code != 2 || !strings.HasPrefix(line, "dpserve: ") || !strings.Contains(line, c.want) || !strings.Contains(line, p) ||
			strings.Count(line, "\n") != 1 {
			t.Errorf("%s store: exit %d, %q; want 2 and one line naming the file and saying %q", c.name, code, line, c.want)
		}
		if b, _ := os.ReadFile(p); !bytes.Equal(b, c.content) {
			t.Errorf("%s store: the file was changed", c.name)
		}
	}
}

// Issue 39 item 6: replicated mode with a -work-dir that does not exist is
// refused at start with one line, before any NATS connection. Before the
// fix it printed "listening" and then lost and won the lease once a second
// forever ("stat ...: no such file"); seen failing (it tried to connect).
func TestReplicatedWorkDirCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for _, wd := range []string{filepath.Join(dir, "missing"), file} {
		code, line := runLines(t, "-nats", "nats://127.0.0.1:1", "-work-dir", wd, "-dim", "2", "-epsilon", "1", "-delta", "1e-6",
			"-horizon", "4", "-clip", "1", "-addr", "127.0.0.1:0")
		if code != 2 || line != "dpserve: -work-dir "+wd+": not an existing directory\n" {
			t.Errorf("-work-dir %s: exit %d, %q", wd, code, line)
		}
	}
}

// Issue 39 item 12: a flag that does not parse is one line with a hint,
// for the service and its commands; -h lists the commands; an unknown
// command says which there are. Before the fix -dim abc printed 73 lines
// (error, usage, error), token -ttl abc 11; seen failing.
func TestFlagErrorsAreOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-dim", "abc"}, `dpserve: invalid value "abc" for flag -dim: parse error (dpserve -h lists the flags)` + "\n"},
		{[]string{"token", "-ttl", "abc"}, `dpserve: invalid value "abc" for flag -ttl: parse error (dpserve token -h lists the flags)` + "\n"},
		{[]string{"key", "-nosuch"}, "dpserve: flag provided but not defined: -nosuch (dpserve key -h lists the flags)\n"},
		{[]string{"nosuch"}, `dpserve: unknown command "nosuch": want key, token or version, or the service's flags (dpserve -h lists them)` + "\n"},
	} {
		code, stderr := runLines(t, c.args...)
		if code != 2 || stderr != c.want {
			t.Errorf("%v: exit %d, %q; want 2, %q", c.args, code, stderr, c.want)
		}
	}
	code, stderr := runLines(t, "-h")
	for _, cmd := range []string{"dpserve key -out FILE", "dpserve token -key FILE", "dpserve version", "-store string"} {
		if code != 0 || !strings.Contains(stderr, cmd) {
			t.Errorf("-h: exit %d, does not list %q:\n%s", code, cmd, stderr)
		}
	}
}
