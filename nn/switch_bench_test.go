package nn

import (
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/blas"
	"github.com/dpmf-go/dpmf/internal/rusage"
)

// stepSwitches are the Options switches BenchmarkStepSwitches compares
// with the default plan, by name ("before" turns off this pass's
// changes to the CNN step: whole pool windows, outputs into the next
// map, the example-major backward; "s48before" the dense head read in
// place, the packing dealt out in turn and chunks of 2; "nopairhead"
// runs the dense head chunk by chunk, "group4" for four chunks at once;
// "nohugepages" leaves the workers' arenas on base pages, "noarena"
// makes their buffers one by one, "nocoldsplit" carves the buffers no
// step touches from the huge-page arenas too).
func stepSwitches() map[string]func(*Options) {
	return map[string]func(*Options){
		"nopoolwindows":  func(o *Options) { o.noPoolWindows = true },
		"nofusegrads":    func(o *Options) { o.noFuseGrads = true },
		"nomajor":        func(o *Options) { o.noExampleMajor = true },
		"nofuseoutputs":  func(o *Options) { o.noFuseOutputs = true },
		"before":         func(o *Options) { o.noPoolWindows, o.noFuseOutputs, o.noExampleMajor = true, true, true },
		"nodeferdense":   func(o *Options) { o.noDeferDense = true },
		"chunk2":         func(o *Options) { o.Chunk = 2 },
		"chunk4":         func(o *Options) { o.Chunk = 4 },
		"chunk8":         func(o *Options) { o.Chunk = 8 },
		"nodenseinplace": func(o *Options) { o.noDenseInPlace = true },
		"nopairhead":     func(o *Options) { o.noPairHead = true },
		"group4":         func(o *Options) { o.headGroup = 4 },
		"noheadstream":   func(o *Options) { o.noHeadStream = true },
		"stream2":        func(o *Options) { o.headStream = 2 },
		"stream3":        func(o *Options) { o.headStream = 3 },
		"nopackjobs":     func(o *Options) { o.noPackJobs = true },
		"noprefetch":     func(o *Options) { o.noPrefetch = true },
		"nofinish":       func(o *Options) { o.noFinish = true },
		"nogpone":        func(o *Options) { o.noGpOne = true },
		"nowarmflush":    func(o *Options) { o.noWarmFlush = true },
		"nopoolout":      func(o *Options) { o.noPoolOut = true },
		"s50before":      func(o *Options) { o.noGpOne, o.noPoolOut, o.noWarmFlush = true, true, true },
		"directfirst":    func(o *Options) { o.directFirst = true },
		"s48before":      func(o *Options) { o.Chunk, o.noDenseInPlace, o.noPackJobs = 4, true, true },
		"nohugepages":    func(o *Options) { o.noHugePages = true },
		"noarena":        func(o *Options) { o.noArena = true },
		"noplaceweights": func(o *Options) { o.noPlaceWeights = true },
		"nocoldsplit":    func(o *Options) { o.noColdSplit = true },
	}
}

// cifarCNN is the CIFAR-10 CNN of models.NewCIFARCNN (which nn's tests
// cannot import) on 32x32x3 inputs.
func cifarCNN() *builder {
	b := &builder{net: Network{Input: Shape{3, 32, 32}}}
	in := 3
	for _, out := range []int{32, 64, 128} {
		b.conv(in, out, 3, 1, 1, Tanh)
		b.conv(out, out, 3, 1, 1, Tanh)
		b.net.Layers = append(b.net.Layers, MaxPool{Size: 2})
		in = out
	}
	b.net.Layers = append(b.net.Layers, Flatten{})
	b.dense(128*4*4, 128, Tanh)
	b.dense(128, 10, Identity)
	return b
}

// BenchmarkStepSwitches times the CIFAR CNN's private step (batch 64, or
// DPMF_BENCH_BATCHES' first size) with the default plan and with each
// switch named in DPMF_SWITCHES (comma-separated; default all of
// stepSwitches) turned on, the variants alternated step by step in one
// process so that other jobs on the machine load them alike; it reports
// each variant's median examples per CPU second (and per wall second)
// over the b.N rounds.
func BenchmarkStepSwitches(b *testing.B) {
	blas.Install()
	names := []string{"default"}
	if env := os.Getenv("DPMF_SWITCHES"); env != "" {
		names = append(names, strings.Split(env, ",")...)
	} else {
		for k := range stepSwitches() {
			names = append(names, k)
		}
		slices.Sort(names[1:])
	}
	batch := 64
	if f := strings.Fields(strings.ReplaceAll(os.Getenv("DPMF_BENCH_BATCHES"), ",", " ")); len(f) > 0 {
		v, err := strconv.Atoi(f[0])
		if err != nil || v <= 0 {
			b.Fatalf("DPMF_BENCH_BATCHES: %q is not a positive batch size", f[0])
		}
		batch = v
	}
	net := cifarCNN()
	rng := rand.New(rand.NewPCG(1, 2))
	params := randParams(rng, net.n)
	for k := range params {
		params[k] *= 0.1
	}
	x, y := net.batch(rng, batch, 10)
	plans := make([]*Plan, len(names))
	for v, name := range names {
		opt := Options{MaxBatch: batch}
		if name != "default" {
			sw, ok := stepSwitches()[name]
			if !ok {
				b.Fatalf("DPMF_SWITCHES: no switch %q", name)
			}
			sw(&opt)
		}
		p, err := NewPlan(net.net, params, opt)
		if err != nil {
			b.Fatal(err)
		}
		plans[v] = p
	}
	dst := make([]float32, net.n)
	cl := &testClipper{}
	cpu := make([][]float64, len(names))
	wall := make([][]float64, len(names))
	for _, p := range plans {
		if _, err := p.Step(x, y, dst, cl); err != nil {
			b.Fatal(err)
		}
	}
	r := 0
	for b.Loop() {
		for k := range names {
			v := (k + r) % len(names)
			c0, t0 := rusage.CPUSeconds(), time.Now()
			if _, err := plans[v].Step(x, y, dst, cl); err != nil {
				b.Fatal(err)
			}
			cpu[v] = append(cpu[v], rusage.CPUSeconds()-c0)
			wall[v] = append(wall[v], time.Since(t0).Seconds())
		}
		r++
	}
	for v, name := range names {
		b.ReportMetric(planHuge(plans[v]), "hugeMiB:"+name)
		slices.Sort(cpu[v])
		slices.Sort(wall[v])
		b.ReportMetric(float64(batch)/cpu[v][len(cpu[v])/2], "ex/cpu-s:"+name)
		b.ReportMetric(float64(batch)/wall[v][len(wall[v])/2], "ex/s:"+name)
	}
}
