package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// Issue 39 items 11 and 12: usage errors are one line and exit 2, before
// any request. Before the fix -n abc printed 24 lines (error and usage)
// and -dim 0 or a non-loopback -url exited 1; seen failing.
func TestUsageErrorsOneLineExitTwo(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "abc"}, `loadgen: invalid value "abc" for flag -n: parse error (loadgen -h lists the flags)`},
		{[]string{"-dim", "0"}, "must be positive"},
		{[]string{"-duration", "0"}, "must be positive"},
		{[]string{"-commit-every", "-1s"}, "must not be negative"},
		{[]string{"-url", "http://192.0.2.1:8377"}, "not a loopback address"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		var stderr bytes.Buffer
		code := run(context.Background(), c.args, io.Discard, &stderr)
		line := stderr.String()
		if code != 2 || strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "loadgen: ") || !strings.Contains(line, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and one line saying %q", c.args, code, line, c.want)
		}
	}
}
