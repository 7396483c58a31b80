package train

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
)

// MaxSteps is the largest number of steps a run takes: per-step arrays
// (learning rates, sampling and accounting schedules) hold 8 bytes a
// step, and a Toeplitz mechanism's noise source is bounded at this n
// (dpcore.StructuredStepLimit).
const MaxSteps = 1 << 23

// memoryLimit is the memory a run may plan for: the least of GOMEMLIMIT
// (when set), the address-space limit (ulimit -v, when set) and the
// machine's physical memory (Linux's /proc/meminfo); 0 when none is known.
func memoryLimit() int64 {
	limit := physicalMemory()
	for _, l := range []int64{debug.SetMemoryLimit(-1), addressSpaceLimit()} {
		if l > 0 && l < math.MaxInt64 && (limit == 0 || l < limit) {
			limit = l
		}
	}
	return limit
}

// physicalMemory is MemTotal of /proc/meminfo, or 0.
func physicalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemTotal:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

// checkMemory refuses, before anything is allocated, a request whose
// arrays alone need more than the memory limit, saying what it would need.
func checkMemory(what string, need float64) error {
	limit := memoryLimit()
	if limit <= 0 || need <= float64(limit) {
		return nil
	}
	return invalidf("%s would need %s of memory, more than the %s available (physical memory, or GOMEMLIMIT or ulimit -v when set)",
		what, dpcore.HumanBytes(need), dpcore.HumanBytes(float64(limit)))
}
