// Package guard holds the refusals every mechanism family and optimizer of
// mfnoise shares, so that each is written once: the step limits of dense
// and structured mechanisms, the memory a dense optimizer would need, and
// the finiteness of numbers and matrices. Each refuses before anything is
// allocated, with one line that says what the request would need; the
// errors are dpcore.ErrInvalid, prefixed "mfnoise".
package guard

import (
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"gonum.org/v1/gonum/mat"
)

// Invalidf is a bad-argument error of mfnoise (dpcore.ErrInvalid).
func Invalidf(format string, args ...any) error {
	return dpcore.Invalid("mfnoise", format, args...)
}

// Steps refuses n steps unless 1 <= n <= dpcore.StructuredStepLimit: the
// per-step arrays of a structured mechanism cost 8 n bytes each.
func Steps(n int) error {
	if n <= 0 {
		return Invalidf("n = %d steps must be positive", n)
	}
	if n > dpcore.StructuredStepLimit {
		return Invalidf("n = %d steps: per-step arrays would need %s each (8 n bytes); the limit is n = %d", n, dpcore.HumanBytes(8*float64(n)), dpcore.StructuredStepLimit)
	}
	return nil
}

// Dense refuses a dense build (name) of n steps holding the given number
// of n x n float64 matrices above dpcore.DenseStepLimit.
func Dense(name string, n, matrices int) error {
	if n > dpcore.DenseStepLimit {
		return Invalidf("%s: n = %d steps needs dense n x n matrices, about %s (%d x 8 n^2 bytes); the limit is n = %d (the Toeplitz mechanisms dpsgd, sqrt, toeplitz:BANDS, blt:NBUF and bisr:BANDS have none)",
			name, n, dpcore.HumanBytes(float64(matrices)*8*float64(n)*float64(n)), matrices, dpcore.DenseStepLimit)
	}
	return nil
}

// Memory refuses, before anything is allocated, an optimizer (what) whose
// dense n x n work matrices need more than the memory this process may
// use (see memoryLimit: GOMEMLIMIT when set, and the memory the machine
// has available now), saying what it would need and what there is.
func Memory(what string, n, matrices int) error {
	need := float64(matrices) * 8 * float64(n) * float64(n)
	meminfo, _ := os.ReadFile("/proc/meminfo")
	limit, source := memoryLimit(string(meminfo), debug.SetMemoryLimit(-1))
	if limit <= 0 || need <= float64(limit) {
		return nil
	}
	return Invalidf("optimize %s: n = %d steps would need about %s of memory (%d dense n x n matrices), more than the %s %s",
		what, n, dpcore.HumanBytes(need), matrices, dpcore.HumanBytes(float64(limit)), source)
}

// memoryLimit is the least of goLimit (the runtime's GOMEMLIMIT, ignored
// when unset: math.MaxInt64) and the memory /proc/meminfo says can be
// allocated now without swapping (MemAvailable; MemTotal on kernels that
// do not report it), with what it is, for the refusal; 0 when neither is
// known. MemTotal alone let a dense optimizer start that needed 22 GiB of
// a 24 GiB machine on which 10 GiB were in use.
func memoryLimit(meminfo string, goLimit int64) (int64, string) {
	fields := map[string]int64{}
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && (f[0] == "MemTotal:" || f[0] == "MemAvailable:") {
			if kb, err := strconv.ParseInt(f[1], 10, 64); err == nil && kb > 0 && kb < math.MaxInt64>>10 {
				fields[f[0]] = kb << 10
			}
		}
	}
	limit, source := fields["MemAvailable:"], "available (MemAvailable of /proc/meminfo)"
	if limit == 0 {
		limit, source = fields["MemTotal:"], "of physical memory"
	}
	if goLimit > 0 && goLimit < math.MaxInt64 && (limit == 0 || goLimit < limit) {
		limit, source = goLimit, "GOMEMLIMIT allows"
	}
	return limit, source
}

// Finite reports whether v is neither NaN nor infinite.
func Finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// FiniteMatrix refuses a matrix (what, e.g. "encoder") with a NaN or
// infinite entry, naming the first.
func FiniteMatrix(what string, a mat.Matrix) error {
	r, c := a.Dims()
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			if v := a.At(i, j); !Finite(v) {
				return Invalidf("%s entry (%d,%d) is %v", what, i, j, v)
			}
		}
	}
	return nil
}
