package train

import (
	"context"
	"os"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/data"
)

// TestFashionMNISTPrivateTraining trains the MLP on real Fashion-MNIST
// (Debian's dataset-fashion-mnist) at epsilon 8 with BandMF and DP-SGD and
// non-privately, and reports the private-vs-non-private gap. The
// thresholds were set from measured runs with fixed seeds (see
// BENCHMARKS.md), well above chance (0.1).
func TestFashionMNISTPrivateTraining(t *testing.T) {
	if _, err := os.Stat(data.DefaultFashionMNISTDir); err != nil {
		t.Skip("requires Debian's dataset-fashion-mnist (apt-get install dataset-fashion-mnist)")
	}
	trainSet, testSet, err := data.LoadFashionMNIST(data.DefaultFashionMNISTDir)
	if err != nil {
		t.Fatal(err)
	}
	steps := 300
	base := Config{
		Data:      Data{Train: trainSet, Test: testSet},
		Model:     ModelSpec{Name: "mlp", Hidden: []int{128}},
		Privacy:   privacy.Request{Steps: steps, Batch: 250, Epsilon: 8, Seed: []byte("fashion e2e"), InsecureSeed: true, CacheDir: t.TempDir()},
		Optimizer: Optimizer{LearningRate: 0.5, CooldownFrac: 0.25},
		Output:    Output{EvalEvery: steps},
	}
	cases := []struct {
		name   string
		edit   func(*Config)
		minAcc float64
	}{
		{"non-private", func(c *Config) { c.NonPrivate = true }, 0.80},
		{"dpsgd", func(c *Config) { c.Privacy.Mechanism = parseMech(t, "dpsgd") }, 0.74},
		{"bandmf", func(c *Config) {
			c.Privacy.Mechanism = parseMech(t, "bandmf:16")
			c.Optimizer.Momentum = 0.95
			c.Optimizer.LearningRate = 0.1
		}, 0.78},
	}
	acc := map[string]float64{}
	for _, tc := range cases {
		cfg := base
		tc.edit(&cfg)
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		acc[tc.name] = res.Final.Accuracy
		eps := 0.0
		if res.Plan != nil {
			eps = res.Plan.Epsilon
			if eps > 8 {
				t.Fatalf("%s: epsilon %v exceeds the target 8", tc.name, eps)
			}
		}
		t.Logf("%-11s test accuracy %.4f (epsilon %.3g) in %.1fs", tc.name, res.Final.Accuracy, eps, res.Elapsed.Seconds())
		if res.Final.Accuracy < tc.minAcc {
			t.Errorf("%s: test accuracy %.4f < %.2f", tc.name, res.Final.Accuracy, tc.minAcc)
		}
	}
	t.Logf("private-vs-non-private gap: dpsgd %.4f, bandmf %.4f", acc["non-private"]-acc["dpsgd"], acc["non-private"]-acc["bandmf"])
}
