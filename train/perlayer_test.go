package train

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

// TestClipPerLayer: per-layer bounds reach the clipping engine (a count
// that does not match the model's layers is refused by it), the noise is
// calibrated to their L2 norm, and bad bounds are refused.
func TestClipPerLayer(t *testing.T) {
	ctx := context.Background()
	cfg := baseConfig(t)
	cfg.Model.Name, cfg.Model.Hidden = "mlp", []int{8}
	cfg.Privacy.NoiseMultiplier, cfg.Privacy.Epsilon = 1.5, 0
	cfg.Privacy.ClipNorm, cfg.Model.ClipPerLayer = 7, []float64{0.3, 0.4}
	tr, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Plan()
	if want := 1.5 * 0.5 * p.Sensitivity.Value; math.Abs(p.NoiseStd-want) > 1e-15*want {
		t.Fatalf("noise std %v, want sigma * ||(0.3, 0.4)|| * sens = %v", p.NoiseStd, want)
	}
	if _, err := tr.TrainStep(ctx); err != nil {
		t.Fatal(err)
	}
	tr.Close()

	cfg.Model.ClipPerLayer = []float64{0.3, 0.4, 0.5}
	if _, err := New(ctx, cfg); err == nil || !strings.Contains(err.Error(), "3 per-layer norms for 2 layers") {
		t.Fatalf("3 bounds for 2 layers: %v", err)
	}
	cfg.Model.ClipPerLayer = []float64{0.3, 0}
	if _, err := New(ctx, cfg); !errors.Is(err, dpcore.ErrInvalid) || !strings.Contains(err.Error(), "per-layer clip bound 1 = 0 must be positive") {
		t.Fatalf("zero bound: %v", err)
	}
}
