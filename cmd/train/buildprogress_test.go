package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/dpmf-go/dpmf/train"
)

// A factorization that must be optimized is announced on stderr; the next
// run says, once, on stdout before the plan, that it used the cached one.
// The Toeplitz optimizers (toeplitz:BANDS, blt:NBUF) report through the
// same trace. (The reporter is the command's: train.Run reports through
// the BuildTrace its context carries.)
func TestBuildProgressAndCachedFactorizationAreReported(t *testing.T) {
	for _, kind := range []string{"mf-single", "toeplitz:4"} {
		cache := t.TempDir()
		args := []string{"run", "-data", "embedded", "-train-examples", "600", "-batch", "50", "-steps", "12", "-model", "logistic",
			"-mechanism", kind, "-momentum", "0.9", "-epsilon", "8", "-cache", cache, "-seed", "1", "-insecure-seed"}
		code, out, stderr := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", kind, code, stderr)
		}
		if !strings.Contains(stderr, "factorization: building "+kind+" (n = 12)") ||
			!strings.Contains(stderr, "factorization: building "+kind+" (n = 12): iteration 1 of at most") ||
			strings.Contains(out+stderr, "cached") {
			t.Fatalf("%s: cold run:\n%s\n%s", kind, out, stderr)
		}
		code, out, stderr = runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", kind, code, stderr)
		}
		line := "factorization: cached " + kind + " for n = 12 from " + cache
		if n := strings.Count(out, line); n != 1 || strings.Contains(out+stderr, "building") || strings.Index(out, line) > strings.Index(out, "mechanism "+kind) {
			t.Fatalf("%s: warm run should say once, before the plan, that the cached factorization is used (%d times):\n%s\n%s", kind, n, out, stderr)
		}
	}
}

func TestBuildProgressEstimate(t *testing.T) {
	// The gap fell from 1e-1 to 1e-2 in 10 s: 1e-4 is two more decades,
	// about 20 s.
	left, ok := estimateLeft(10*time.Second, 1e-1, 1e-2, 1e-4)
	if !ok || math.Abs(left.Seconds()-20) > 1e-6 {
		t.Fatalf("estimate %v %v, want 20s", left, ok)
	}
	if _, ok := estimateLeft(time.Second, 1e-2, 1e-2, 1e-4); ok {
		t.Fatal("an estimate without any progress")
	}
	var log bytes.Buffer
	b := newBuildProgress(&log, progressEvery, nil)
	b.every = 0
	b.start, b.target = time.Now().Add(-10*time.Second), 1e-4
	b.progress(mfnoiseProgress(1, 1e-1))
	b.progress(mfnoiseProgress(2, 1e-2))
	if !strings.Contains(log.String(), "iteration 2") || !strings.Contains(log.String(), "gap 0.01 (target 0.0001), about 20s left") {
		t.Fatalf("progress lines:\n%s", log.String())
	}
}

func mfnoiseProgress(iter int, gap float64) optimize.Progress {
	return optimize.Progress{Iter: iter, Loss: 10, LowerBound: 10 * (1 - gap), Gap: gap}
}

// Computing features is announced at once, then reported at most every
// period with the examples done and the time left, and the last block is
// always reported.
func TestFeaturesProgressThrottledWithTimeLeft(t *testing.T) {
	var b bytes.Buffer
	p := newFeaturesProgress(&b, 5*time.Second)
	for i, el := range []time.Duration{1, 2, 6, 7, 12} {
		p.report(train.FeaturesProgress{Set: "fashion-mnist/train", Done: 1000 * (i + 1), Total: 6000, Elapsed: el * time.Second})
	}
	p.report(train.FeaturesProgress{Set: "fashion-mnist/train", Done: 6000, Total: 6000, Elapsed: 13 * time.Second})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"features: computing those of fashion-mnist/train (6000 examples;",
		"features: fashion-mnist/train: 3000 of 6000 examples, 6s elapsed, about 6s left",
		"features: fashion-mnist/train: 5000 of 6000 examples, 12s elapsed, about 2s left",
		"features: fashion-mnist/train: 6000 of 6000 examples, 13s elapsed",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), b.String())
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}
}

// Issue 39 item 2: the final line says whether the features were computed
// or read from the cache, and in how long.
func TestFinalLineSaysHowFeaturesCame(t *testing.T) {
	for _, c := range []struct {
		done []train.FeaturesDone
		want string
	}{
		{nil, ""},
		{[]train.FeaturesDone{{Set: "train", Seconds: 80}, {Set: "test", Seconds: 12.5}}, ", of which 92.5s computing the features"},
		{[]train.FeaturesDone{{Set: "train", Cached: true, Seconds: 1}, {Set: "test", Cached: true, Seconds: 0.25}}, "; features read from the cache in 1.2s"},
		{[]train.FeaturesDone{{Set: "train", Cached: true, Seconds: 1}, {Set: "test", Seconds: 12}}, ", of which features: 12.0s computing, 1.0s reading from the cache"},
	} {
		if got := featuresNote(c.done); got != c.want {
			t.Errorf("%+v: %q, want %q", c.done, got, c.want)
		}
	}
}
