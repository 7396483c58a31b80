package nn

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/internal/rusage"
)

// wrnNet is WideResNet-16-4 with GroupNorm(16) on 32x32x3 inputs, 10
// classes, as package models builds it (models.NewWRN16x4), written
// here with the test builder (package models imports nn).
func wrnNet() *builder {
	b := &builder{net: Network{Input: Shape{3, 32, 32}}}
	gn := func(bb *builder, c int) Layer {
		return GroupNorm{Groups: 16, Act: ReLU, Weight: bb.param(c), Bias: bb.param(c)}
	}
	b.conv(3, 16, 3, 1, 1, Identity)
	in, size := 16, 32
	for g, width := range []int{64, 128, 256} {
		for k := range 2 {
			stride := 1
			if g > 0 && k == 0 {
				stride = 2
			}
			body := &builder{n: b.n}
			body.net.Layers = append(body.net.Layers, gn(body, in))
			body.conv(in, width, 3, stride, 1, Identity)
			body.net.Layers = append(body.net.Layers, gn(body, width))
			body.conv(width, width, 3, 1, 1, Identity)
			b.n = body.n
			var short []Layer
			if stride != 1 || in != width {
				sc := &builder{n: b.n}
				sc.conv(in, width, 1, stride, 0, Identity)
				b.n = sc.n
				short = sc.net.Layers
			}
			b.net.Layers = append(b.net.Layers, Residual{Body: body.net.Layers, Shortcut: short})
			in, size = width, size/stride
		}
	}
	b.net.Layers = append(b.net.Layers, gn(b, in), AvgPool{Size: size}, Flatten{})
	b.dense(in, 10, Identity)
	return b
}

// BenchmarkWRNVariants runs WideResNet-16-4's private step (flat clip
// norm 1) with ghost norms on and off (Options.noGhost) at chunks of 2
// and 4, and the non-private step at both, the variants' steps
// alternated in one process (other jobs on the machine disturb them
// alike), and reports each variant's examples per CPU second.
// DPMF_BENCH_BATCHES sets the batches (default 16 and 64),
// DPMF_WRN_VARIANTS the variants run (names, space-separated).
func BenchmarkWRNVariants(b *testing.B) {
	batches := []int{16, 64}
	if env := os.Getenv("DPMF_BENCH_BATCHES"); env != "" {
		batches = nil
		for _, f := range strings.Fields(env) {
			n, err := strconv.Atoi(f)
			if err != nil {
				b.Fatal(err)
			}
			batches = append(batches, n)
		}
	}
	type variant struct {
		name string
		opt  Options
	}
	variants := []variant{
		{"ghost-c2", Options{Chunk: 2}},
		{"nonpriv-c2", Options{Chunk: 2}},
		{"nonpriv-c4", Options{Chunk: 4}},
		{"stored-c2", Options{Chunk: 2, noGhost: true}},
		{"ghost-c4", Options{Chunk: 4}},
		{"stored-c4", Options{Chunk: 4, noGhost: true}},
	}
	if env := os.Getenv("DPMF_WRN_VARIANTS"); env != "" {
		var keep []variant
		for _, v := range variants {
			if strings.Contains(" "+env+" ", " "+v.name+" ") {
				keep = append(keep, v)
			}
		}
		variants = keep
	}
	nb := wrnNet()
	rng := rand.New(rand.NewPCG(1, 2))
	params := make([]float32, nb.n)
	for k := range params {
		params[k] = float32(0.05 * rng.NormFloat64())
	}
	for _, batch := range batches {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			x, y := nb.batch(rng, batch, 10)
			plans := make([]*Plan, len(variants))
			for k, v := range variants {
				v.opt.MaxBatch = batch
				p, err := NewPlan(nb.net, params, v.opt)
				if err != nil {
					b.Fatal(err)
				}
				plans[k] = p
			}
			dst := make([]float32, nb.n)
			cl := &flatClipper{zeta: 1, sq: make([][]float64, batch)}
			cpu := make([]float64, len(variants))
			for _, p := range plans { // warm
				if _, err := p.Step(x, y, dst, cl); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			n := 0
			for b.Loop() {
				for k, p := range plans {
					c0 := rusage.CPUSeconds()
					var c Clipper = cl
					if strings.HasPrefix(variants[k].name, "nonpriv") {
						c = nil
					}
					if _, err := p.Step(x, y, dst, c); err != nil {
						b.Fatal(err)
					}
					cpu[k] += rusage.CPUSeconds() - c0
				}
				n++
			}
			for k, v := range variants {
				b.ReportMetric(float64(n*batch)/cpu[k], v.name+"-ex/cpu-s")
			}
		})
	}
}
