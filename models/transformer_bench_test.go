package models

import (
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/dpmf-go/dpmf/internal/rusage"
	"github.com/dpmf-go/dpmf/nn"
)

// benchGPT2 is the ~10M-parameter GPT-2-shaped model of the LoRA step
// benchmark (BENCHMARKS.md, "Private LoRA step"): vocabulary 20000,
// context 128, dimension 256, 4 heads, 6 blocks (9.9M parameters);
// adapters of rank 8 on attn.c_attn and attn.c_proj.
func benchGPT2(b *testing.B, lora bool) (Model, nn.Transformer) {
	c := TransformerConfig{Vocab: 20000, Context: 128, Dim: 256, Heads: 4, Blocks: 6, Causal: true}
	if lora {
		c.LoRARank, c.LoRAAlpha, c.LoRATargets, c.FreezeBase = 8, 16, []string{"attn.c_attn", "attn.c_proj"}, true
	}
	m, err := NewTransformer("gpt2-bench", c, 1)
	if err != nil {
		b.Fatal(err)
	}
	net, _, _ := TransformerOf(m)
	if lora {
		// Adapters as after some training (B nonzero).
		for _, p := range m.Layout() {
			if len(p.Name) > 7 && p.Name[len(p.Name)-7:] == "/lora_B" {
				for j := range p.Len {
					m.Params()[p.Offset+j] = 0.01
				}
			}
		}
	}
	return m, net
}

type clipTo struct{ c float64 }

func (k clipTo) Scale(_ int, sq []float64, _ float64, f []float64) {
	s := 0.0
	for _, v := range sq {
		s += v
	}
	r := 1.0
	if s > k.c*k.c {
		r = k.c / sqrtF(s)
	}
	for i := range f {
		f[i] = r
	}
}

func sqrtF(x float64) float64 {
	z := x
	for range 60 {
		z = (z + x/z) / 2
	}
	return z
}

// BenchmarkGPT2Step is one training step at sequence length 128 over a
// batch of DPMF_BENCH_BATCH examples (default 16): private LoRA (clipped
// per example to 1), non-private LoRA, private full fine-tuning. Next to
// ms/step and examples/s it reports examples/cpu-s, maxRSS-MiB and
// gemm-bound: the step's matrix products, each timed alone at its real
// shape and layout on one core (nn.SeqPlan.TimeProducts, the fastest of
// its runs), summed and divided by the workers, as a fraction of the
// step's wall time (1: the step does nothing but its products, each at
// its best speed, on every core all the time); gemm-bound-cpu is the same
// in CPU seconds, which other jobs on a shared machine disturb less.
// DPMF_BENCH_PRODUCTS=1 also logs each product.
func BenchmarkGPT2Step(b *testing.B) {
	batch := 16
	if s := os.Getenv("DPMF_BENCH_BATCH"); s != "" {
		batch, _ = strconv.Atoi(s)
	}
	for _, mode := range []struct {
		name          string
		lora, private bool
	}{{"lora-private", true, true}, {"lora-nonprivate", true, false}, {"full-private", false, true}} {
		b.Run(mode.name, func(b *testing.B) {
			m, net := benchGPT2(b, mode.lora)
			plan, err := nn.NewSeqPlan(net, m.Params(), nn.Options{MaxBatch: batch})
			if err != nil {
				b.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			x := make([]float32, batch*128)
			for k := range x {
				x[k] = float32(rng.IntN(20000))
			}
			y := make([]int, batch)
			dst := make([]float32, m.NumParams())
			var clip nn.Clipper
			if mode.private {
				clip = clipTo{1}
			}
			runtime.GC()
			cpu0 := rusage.CPUSeconds()
			b.ResetTimer()
			for b.Loop() {
				if _, err := plan.Step(x, y, dst, clip); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			cpu := rusage.CPUSeconds() - cpu0
			n := float64(batch) * float64(b.N)
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
			b.ReportMetric(n/b.Elapsed().Seconds(), "examples/s")
			b.ReportMetric(n/cpu, "examples/cpu-s")
			b.ReportMetric(rusage.MaxRSSMiB(), "maxRSS-MiB")
			plan.RecordProducts(true)
			_, err = plan.Step(x, y, dst, clip)
			list := plan.Products()
			plan.RecordProducts(false)
			if err != nil {
				b.Fatal(err)
			}
			var logf func(string, ...any)
			if os.Getenv("DPMF_BENCH_PRODUCTS") != "" {
				logf = b.Logf
			}
			bound, err := nn.Bound(list, plan.TimeProducts, logf)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(bound.Seconds()/float64(plan.Workers())/(b.Elapsed().Seconds()/float64(b.N)), "gemm-bound")
			b.ReportMetric(bound.Seconds()/(cpu/float64(b.N)), "gemm-bound-cpu")
		})
	}
}
