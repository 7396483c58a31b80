package guard

import (
	"math"
	"strings"
	"testing"
)

// The memory limit is what can be allocated now, not the machine's total:
// with 10 of 24 GiB in use, a dense optimizer needing 22 GiB must be
// refused (it was let through against MemTotal and ran the machine out of
// memory).
func TestMemoryLimitIsWhatIsAvailable(t *testing.T) {
	const gib = int64(1) << 30
	const meminfo = "MemTotal:       24576000 kB\nMemFree:         7000000 kB\nMemAvailable:   13631488 kB\nBuffers:            1024 kB\n"
	for _, c := range []struct {
		name     string
		meminfo  string
		goLimit  int64
		want     int64
		wantFrom string
	}{
		{"available", meminfo, math.MaxInt64, 13 * gib, "available"},
		{"GOMEMLIMIT below it", meminfo, 2 * gib, 2 * gib, "GOMEMLIMIT"},
		{"GOMEMLIMIT above it", meminfo, 20 * gib, 13 * gib, "available"},
		{"old kernel: no MemAvailable", "MemTotal:       24576000 kB\n", math.MaxInt64, 24576000 << 10, "physical"},
		{"nothing known", "", math.MaxInt64, 0, ""},
		{"only GOMEMLIMIT", "garbage\nMemAvailable: x kB\nMemTotal: -5 kB\n", 3 * gib, 3 * gib, "GOMEMLIMIT"},
	} {
		got, from := memoryLimit(c.meminfo, c.goLimit)
		if got != c.want || !strings.Contains(from, c.wantFrom) {
			t.Errorf("%s: %d (%s), want %d (%s)", c.name, got, from, c.want, c.wantFrom)
		}
	}
	// The 22 GiB case: refused with what it needs and what there is.
	need := 44 * 8 * 8000.0 * 8000.0
	if limit, _ := memoryLimit(meminfo, math.MaxInt64); need <= float64(limit) {
		t.Errorf("need %g bytes fits under %d", need, limit)
	}
}
