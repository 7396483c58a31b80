package data

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// Issue 28 item 9: a gzipped dataset file with flipped bytes is reported
// as corrupt (the gzip stream fails its checks), not as "truncated" or
// "oversized" from the length the damaged stream happens to decode to.
// Before the fix a flipped byte in the embedded training images said
// "oversized: data continues past the 47040000 bytes" (seen failing).
func TestFlippedGzipByteSaysCorrupt(t *testing.T) {
	good, err := os.ReadFile("embedded/train-labels-idx1-ubyte.gz")
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, at := range []int{len(good) / 3, len(good) / 2, 2 * len(good) / 3, len(good) - 20} {
		bad := append([]byte(nil), good...)
		bad[at] ^= 0x5a
		_, _, err := DecodeIDX(bytes.NewReader(bad))
		if err == nil {
			continue // a flip the decoder cannot see is no case here
		}
		failed++
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "corrupt") ||
			strings.Contains(err.Error(), "oversized") || strings.Contains(err.Error(), "truncated:") {
			t.Errorf("byte %d flipped: %v, want it called corrupt", at, err)
		}
	}
	if failed == 0 {
		t.Fatal("no flip was detected: the test checks nothing")
	}
}
