package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/syncbuf"
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
		code, line := runLines(t, "-nats", "nats://u:p@127.0.0.1:1", "-work-dir", wd, "-dim", "2", "-epsilon", "1", "-delta", "1e-6",
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

// Issue 39 item 13: a release page parameter given twice is refused (the
// first was used); a step beyond int64 is "no such release", not "want a
// positive integer". Seen failing (200 and 400).
func TestReleaseParamsRefusedOrAnswered(t *testing.T) {
	srv := testServer(t)
	code, m := do(t, "GET", srv.URL+"/v1/releases?from=1&from=2", "")
	if code != 400 || !strings.Contains(fmt.Sprint(m["error"]), `"from" given 2 times`) {
		t.Errorf("from twice: %d %v", code, m)
	}
	code, m = do(t, "GET", srv.URL+"/v1/releases/99999999999999999999", "")
	if code != 404 || !strings.Contains(fmt.Sprint(m["error"]), "no such release") {
		t.Errorf("huge step: %d %v", code, m)
	}
}

// Issue 39 item 13: the server logs no request, not even a failed TLS
// handshake with the caller's address (net/http logged "http: TLS
// handshake error from 127.0.0.1:..." to the standard logger; seen
// failing).
func TestNoTLSHandshakeLog(t *testing.T) {
	var logged syncbuf.Buffer
	log.SetOutput(&logged)
	defer log.SetOutput(os.Stderr)
	cert, key := writeCert(t)
	var stdout, stderr syncbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"-store", filepath.Join(t.TempDir(), "s.db"), "-dim", "2", "-epsilon", "1", "-delta", "1e-6",
			"-horizon", "4", "-clip", "1", "-addr", "127.0.0.1:0", "-tls-cert", cert, "-tls-key", key}, &stdout, &stderr)
	}()
	defer func() { cancel(); <-done }()
	var addr string
	for i := 0; i < 200 && addr == ""; i++ {
		time.Sleep(50 * time.Millisecond)
		if _, after, ok := strings.Cut(stdout.String(), "listening on "); ok {
			addr = strings.TrimSpace(after)
		}
	}
	if addr == "" {
		t.Fatalf("server did not start: %s", stderr.String())
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")) // plain HTTP to the TLS port
	io.ReadAll(c)
	c.Close()
	time.Sleep(200 * time.Millisecond)
	if s := logged.String() + stderr.String(); strings.Contains(s, "handshake") || strings.Contains(s, "127.0.0.1:") {
		t.Errorf("a failed handshake was logged: %q", s)
	}
}
