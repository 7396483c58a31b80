package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/optimize"
	"github.com/schollz/progressbar/v3"
)

// buildProgress reports the building of factorizations (an
// mfnoise.BuildTrace, which train.Run and mfnoise.Compare find in their
// context) for "train run" and "train compare": a line when an
// optimizer starts, a progress line at most every Every with the iteration,
// the gap and an estimate of the time left, and a line when it is done.
// With a bar writer (a terminal) the progress goes to a progress bar there
// instead of the progress lines. Factorizations read from the cache are
// collected and reported once by Summary, or at once to cachedLog when it
// is set. A nil *buildProgress does nothing.
type buildProgress struct {
	log      io.Writer
	barW     io.Writer
	every    time.Duration
	bar      *progressbar.ProgressBar
	what     string
	start    time.Time
	last     time.Time
	target   float64
	firstGap float64
	cached   []string
	// cachedLog, when set, receives each cached factorization's line as it
	// is read (train run: before the plan it feeds).
	cachedLog io.Writer
}

// progressEvery is how often "train run" writes a progress line.
const progressEvery = 5 * time.Second

// newBuildProgress reports to log (nil: no reports) at most every every,
// drawing a progress bar on bar when it is not nil.
func newBuildProgress(log io.Writer, every time.Duration, bar io.Writer) *buildProgress {
	if log == nil {
		return nil
	}
	return &buildProgress{log: log, barW: bar, every: every}
}

// Attach returns ctx carrying the reporter to mfnoise.Build and
// mfnoise.Compare.
func (b *buildProgress) Attach(ctx context.Context) context.Context {
	if b == nil {
		return ctx
	}
	return mfnoise.WithBuildTrace(ctx, &mfnoise.BuildTrace{
		Optimizing: b.optimizing,
		Progress:   b.progress,
		Optimized: func(kind string, n int, elapsed time.Duration) {
			if b.bar != nil {
				b.bar.Finish()
				b.bar = nil
			}
			fmt.Fprintf(b.log, "factorization: %s optimized in %.1fs\n", b.what, elapsed.Seconds())
		},
		Certified: b.certified,
		Cached: func(kind string, n int, path string) {
			line := fmt.Sprintf("%s for n = %d from %s", kind, n, path)
			if b.cachedLog != nil {
				fmt.Fprintf(b.cachedLog, "factorization: cached %s\n", line)
				return
			}
			b.cached = append(b.cached, line)
		},
		Rebuilding: func(path string, reason error) {
			if b.log != nil {
				fmt.Fprintf(b.log, "factorization: cache entry %s is unusable (%s); building it again\n", path, strings.TrimPrefix(reason.Error(), "mfnoise: cache: "))
			}
		},
	})
}

// certified states what the optimizer proved: the relative gap between
// its loss and its lower bound on the family's optimum, an upper bound on
// how far the encoder is from the best one of its family. A family
// without a bound says nothing more.
func (b *buildProgress) certified(kind string, n int, loss, lowerBound, gap float64, status optimize.Status) {
	if !(lowerBound > 0) {
		return
	}
	how := ""
	if status != optimize.Converged {
		how = fmt.Sprintf(" (the optimizer %s before its target gap)", status)
	}
	fmt.Fprintf(b.log, "factorization: %s proven within %s%% of the best %s encoder%s\n", b.what, roundUp2(100*gap), kind, how)
}

// roundUp2 formats x > 0 with two significant digits, rounded up, so that
// "within x" still holds as printed.
func roundUp2(x float64) string {
	if !(x > 0) {
		return "0"
	}
	unit := math.Pow(10, math.Floor(math.Log10(x))-1)
	return fmt.Sprintf("%.2g", math.Ceil(x/unit*(1-1e-12))*unit)
}

func (b *buildProgress) optimizing(kind string, n int, gap float64) {
	b.what = fmt.Sprintf("%s (n = %d)", kind, n)
	// The first iteration is reported at once, then at most every b.every.
	b.start, b.last, b.target, b.firstGap = time.Now(), time.Time{}, gap, 0
	stop := fmt.Sprintf("stops at relative gap %.2g", gap)
	if gap == 0 {
		stop = "stops when the loss stalls"
	}
	if b.barW == nil {
		stop += fmt.Sprintf("; progress every %v", b.every)
	}
	fmt.Fprintf(b.log, "factorization: building %s, %s\n", b.what, stop)
	if b.barW != nil {
		b.bar = progressbar.NewOptions(-1,
			progressbar.OptionSetWriter(b.barW),
			progressbar.OptionSetDescription("building "+b.what),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
	}
}

func (b *buildProgress) progress(p optimize.Progress) {
	if p.Gap > 0 && !math.IsInf(p.Gap, 0) && b.firstGap == 0 {
		b.firstGap = p.Gap
	}
	now := time.Now()
	if b.bar == nil && now.Sub(b.last) < b.every {
		return
	}
	b.last = now
	elapsed := now.Sub(b.start)
	line := fmt.Sprintf("iteration %d", p.Iter)
	if p.MaxIter > 0 {
		line += fmt.Sprintf(" of at most %d", p.MaxIter)
	}
	line += fmt.Sprintf(", loss %.6g", p.Loss)
	if p.Gap > 0 && !math.IsInf(p.Gap, 0) {
		line += fmt.Sprintf(", gap %.2g (target %.2g)", p.Gap, b.target)
		if left, ok := estimateLeft(elapsed, b.firstGap, p.Gap, b.target); ok {
			line += fmt.Sprintf(", about %s left", left.Round(time.Second))
		}
	}
	if b.bar != nil {
		b.bar.Describe("building " + b.what + ": " + line)
		b.bar.Add(1)
		return
	}
	fmt.Fprintf(b.log, "factorization: building %s: %s, %s elapsed\n", b.what, line, elapsed.Round(time.Second))
}

// estimateLeft extrapolates a gap that shrinks geometrically: having gone
// from first to now in elapsed, reaching target takes
// elapsed * log(now/target) / log(first/now) more.
func estimateLeft(elapsed time.Duration, first, now, target float64) (time.Duration, bool) {
	if !(first > now && now > target && target > 0) {
		return 0, false
	}
	r := math.Log(now/target) / math.Log(first/now)
	if math.IsInf(r, 0) || math.IsNaN(r) || r > 1e6 {
		return 0, false
	}
	return time.Duration(float64(elapsed) * r), true
}

// Summary says, once, which factorizations came from the cache.
func (b *buildProgress) Summary(w io.Writer) {
	if b == nil {
		return
	}
	for _, c := range b.cached {
		fmt.Fprintf(w, "factorization: cached %s\n", c)
	}
}
