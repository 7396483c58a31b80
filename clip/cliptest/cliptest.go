// Package cliptest makes the extreme examples with which every engine's
// tests check the rule of docs/math.md §9.4: one example's or one user's
// data, however large, infinite or undefined, changes nothing in a step's
// control flow and contributes at most the clip norm; and records the
// results of clipped sums (Golden, CheckGolden), so that a change that must
// not move a contribution by one bit can be checked against the code
// before it.
package cliptest

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/cpu"
)

// Kinds are the kinds of extreme example Corrupt makes.
func Kinds() []string { return []string{"huge", "sentinel", "max", "inf", "nan"} }

// Corrupt turns x into an extreme example of the kind, in place: "huge"
// puts one value of 1e30 to the float32 maximum, either sign; "sentinel"
// one 3e38 (a missing-value code of CSV exports); "max" sets every value
// to the float32 maximum, either sign; "inf" one infinity, either sign;
// "nan" one NaN.
func Corrupt(rng *rand.Rand, kind string, x []float32) {
	k := rng.IntN(len(x))
	sign := float32(1 - 2*rng.IntN(2))
	switch kind {
	case "huge":
		x[k] = sign * float32(math.Min(math.Pow(10, 30+8.6*rng.Float64()), math.MaxFloat32))
	case "sentinel":
		x[k] = 3e38
	case "max":
		for j := range x {
			x[j] = float32(math.MaxFloat32) * float32(1-2*rng.IntN(2))
		}
	case "inf":
		x[k] = float32(math.Inf(int(sign)))
	case "nan":
		x[k] = float32(math.NaN())
	}
}

// Golden is one recorded result of a clipped sum: its float32 bits (as a
// SHA-256 prefix) and its statistics st, printed with %+v (every float64
// round-trips).
func Golden(name string, sum []float32, st any) string {
	h := sha256.New()
	var b [4]byte
	for _, v := range sum {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
		h.Write(b[:])
	}
	return fmt.Sprintf("%s %x %+v", name, h.Sum(nil)[:12], st)
}

// CheckGolden compares got (one Golden line per result) with the file at
// path, or rewrites the file when update is set. The file's first line
// names the machine when machine is set (engines compute with package
// blas's kernels, chosen by CPU): on another machine the test says so and
// skips.
func CheckGolden(t testing.TB, path string, machine bool, got []string, update bool) {
	t.Helper()
	key := "# any machine"
	if machine {
		key = fmt.Sprintf("# %s avx2+fma=%v avx512f=%v", runtime.GOARCH, cpu.X86.HasAVX2 && cpu.X86.HasFMA, cpu.X86.HasAVX512F)
	}
	if update {
		if err := os.WriteFile(path, []byte(key+"\n"+strings.Join(got, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if want[0] != key {
		t.Skipf("%s was recorded on %q, this machine is %q", path, want[0], key)
	}
	want = want[1:]
	if len(want) != len(got) {
		t.Fatalf("%d results, %s holds %d", len(got), path, len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("result %d differs from the recorded one:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
