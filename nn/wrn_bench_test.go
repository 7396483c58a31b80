package nn

import (
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/rusage"
)

// wrnNet is WideResNet-16-4 with GroupNorm (models.NewWRN16x4's layers)
// on 32x32x3 inputs, and its parameters (weights uniform in the fan-in's
// He bound, norms' scales 1).
func wrnNet(groups int, rng *rand.Rand) (Network, []float32) {
	var params []float32
	param := func(n int, lim float32) Param {
		p := Param{len(params), n}
		for range n {
			v := float32(1)
			if lim > 0 {
				v = lim * float32(2*rng.Float64()-1)
			} else if lim == 0 {
				v = 0
			}
			params = append(params, v)
		}
		return p
	}
	conv := func(in, out, k, stride, pad int) Layer {
		fi := k * k * in
		return Conv2D{Out: out, Kernel: k, Stride: stride, Pad: pad, Weight: param(fi*out, float32(math.Sqrt(6/float64(fi)))), Bias: param(out, 0)}
	}
	norm := func(c int) Layer {
		return GroupNorm{Groups: groups, Act: ReLU, Weight: param(c, -1), Bias: param(c, 0)}
	}
	layers := []Layer{conv(3, 16, 3, 1, 1)}
	in := 16
	for g, width := range []int{64, 128, 256} {
		for k := range 2 {
			stride := 1
			if g > 0 && k == 0 {
				stride = 2
			}
			body := []Layer{norm(in), conv(in, width, 3, stride, 1), norm(width), conv(width, width, 3, 1, 1)}
			var sc []Layer
			if stride != 1 || in != width {
				sc = []Layer{conv(in, width, 1, stride, 0)}
			}
			layers = append(layers, Residual{Body: body, Shortcut: sc})
			in = width
		}
	}
	layers = append(layers, norm(in), AvgPool{Size: 8}, Flatten{})
	fi := in
	layers = append(layers, Dense{Out: 10, Weight: param(fi*10, float32(math.Sqrt(6/float64(fi)))), Bias: param(10, 0)})
	return Network{Input: Shape{3, 32, 32}, Layers: layers}, params
}

// wrnClipper clips each example's whole gradient to L2 norm 1.
type wrnClipper struct{}

func (wrnClipper) Scale(_ int, sq []float64, _ float64, c []float64) {
	t := 0.0
	for _, v := range sq {
		t += v
	}
	f := 1.0
	if t > 1 {
		f = 1 / math.Sqrt(t)
	}
	if math.IsNaN(t) {
		f = 0
	}
	for k := range c {
		c[k] = f
	}
}

// BenchmarkWRNSwitches runs WideResNet-16-4's step (batch
// DPMF_BENCH_BATCH, default 64; private unless DPMF_BENCH_PRIVATE=0) on
// plans alternated step by step in one process: the plan as it is,
// and the plan with the Options switches DPMF_BENCH_SWITCH turned off
// (noImplicit, noStride2, noFuseNorms, noFuseJoins, noFuseGrads,
// noRecompute, noGhost, noCol2imRows, noPrefetch, noHugePages, noArena,
// noColdSplit; chunkN: chunks of N examples), reporting each one's
// examples per CPU second and their ratio, and per wall second.
// Alternating steps exposes both to the same load from other jobs on
// the machine.
func BenchmarkWRNSwitches(b *testing.B) {
	batch := 64
	if v, err := strconv.Atoi(os.Getenv("DPMF_BENCH_BATCH")); err == nil && v > 0 {
		batch = v
	}
	private := os.Getenv("DPMF_BENCH_PRIVATE") != "0"
	sw := os.Getenv("DPMF_BENCH_SWITCH")
	rng := rand.New(rand.NewPCG(1, 2))
	net, params := wrnNet(16, rng)
	alt := Options{MaxBatch: batch}
	for _, name := range strings.Fields(sw) {
		switch name {
		case "noImplicit":
			alt.noImplicit = true
		case "noFuseGrads":
			alt.noFuseGrads = true
		case "noFuseNorms":
			alt.noFuseNorms = true
		case "noFuseJoins":
			alt.noFuseJoins = true
		case "noStride2":
			alt.noStride2 = true
		case "noRecompute":
			alt.noRecompute = true
		case "noGhost":
			alt.noGhost = true
		case "noCol2imRows":
			alt.col2imRows = -1
		case "noPrefetch":
			alt.noPrefetch = true
		case "noHugePages":
			alt.noHugePages = true
		case "noArena":
			alt.noArena = true
		case "noColdSplit":
			alt.noColdSplit = true
		default:
			if c, err := strconv.Atoi(strings.TrimPrefix(name, "chunk")); err == nil && c > 0 && strings.HasPrefix(name, "chunk") {
				alt.Chunk = c // chunkN: the other plans take chunks of N
				continue
			}
			b.Fatalf("DPMF_BENCH_SWITCH=%q: unknown switch %q", sw, name)
		}
	}
	// Two plans of each kind, made in the order on, off, off, on, so that
	// where their buffers land in memory (which moves a step's time by a
	// few percent) does not favour one kind.
	var plans [4]*Plan
	for k, o := range []Options{{MaxBatch: batch}, alt, alt, {MaxBatch: batch}} {
		p, err := NewPlan(net, params, o)
		if err != nil {
			b.Fatal(err)
		}
		plans[k] = p
	}
	x := make([]float32, batch*net.Input.Size())
	for k := range x {
		x[k] = float32(rng.NormFloat64())
	}
	y := make([]int, batch)
	for k := range y {
		y[k] = rng.IntN(10)
	}
	dst := make([]float32, len(params))
	var clip Clipper
	if private {
		clip = wrnClipper{}
	}
	var cpu, wall [2][]float64
	for _, p := range plans {
		if _, err := p.Step(x, y, dst, clip); err != nil {
			b.Fatal(err)
		}
	}
	k := 0
	for b.Loop() {
		p := plans[k%4]
		c0, t0 := rusage.CPUSeconds(), time.Now()
		if _, err := p.Step(x, y, dst, clip); err != nil {
			b.Fatal(err)
		}
		v := 0 // on
		if k%4 == 1 || k%4 == 2 {
			v = 1
		}
		cpu[v] = append(cpu[v], rusage.CPUSeconds()-c0)
		wall[v] = append(wall[v], time.Since(t0).Seconds())
		k++
	}
	if len(cpu[1]) == 0 {
		return
	}
	// Examples per CPU second of the median step, and over all steps.
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return float64(batch) / v[len(v)/2]
	}
	all := func(v []float64) float64 {
		t := 0.0
		for _, c := range v {
			t += c
		}
		return float64(batch*len(v)) / t
	}
	b.ReportMetric(med(cpu[0]), "on-ex/cpu-s")
	b.ReportMetric(med(cpu[1]), "off-ex/cpu-s")
	b.ReportMetric(med(cpu[0])/med(cpu[1]), "on/off")
	b.ReportMetric(all(cpu[0])/all(cpu[1]), "on/off-mean")
	b.ReportMetric(med(wall[0]), "on-ex/s")
	b.ReportMetric(med(wall[1]), "off-ex/s")
	b.Logf("%s off: %d steps each", sw, len(cpu[1]))
}
