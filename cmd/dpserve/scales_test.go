package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClipOutOfRange: a clip norm whose noise scale or releases would not
// be finite in float64 is refused at start with one line and exit status
// 2, in the single-node mode (before anything is stored) and in the
// replicated mode (before connecting: no NATS server listens at the URL
// given). -clip 1e308 used to start: every commit then spent budget and
// answered 500, and the releases and the ledger answered 500 for good.
func TestClipOutOfRange(t *testing.T) {
	for _, mode := range [][]string{
		{"-store", filepath.Join(t.TempDir(), "s.db")},
		{"-nats", "nats://u:p@127.0.0.1:1", "-work-dir", t.TempDir()},
	} {
		for _, clip := range []string{"1e308", "1e-308"} {
			args := append(append([]string{}, mode...), "-dim", "2", "-epsilon", "1", "-delta", "1e-6", "-horizon", "8",
				"-clip", clip, "-addr", "127.0.0.1:0")
			var stderr bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			code := run(ctx, args, io.Discard, &stderr)
			cancel()
			if code != 2 || strings.Count(stderr.String(), "\n") != 1 || !strings.Contains(stderr.String(), "clip norm") {
				t.Errorf("%s -clip %s: exit %d, %q; want 2 and one line naming the clip norm", mode[0], clip, code, stderr.String())
			}
		}
	}
}
