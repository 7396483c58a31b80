package clip

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

// TestClippedNormBound checks that every single example's clipped
// contribution has norm <= zeta exactly (the float64 norm of the float32
// output, no tolerance), flat and per layer, with gradients of huge norm
// (parameters scaled up to 1000x, inputs of size 1e3) and near-constant
// inputs whose convolution gradients are sums of nearly equal rows.
// (nn's TestNormsUnderCancellation has a case where the old float32 ghost
// norms were 30% off.)
func TestClippedNormBound(t *testing.T) {
	worst := 0.0
	for _, mk := range []func() (models.Model, error){
		func() (models.Model, error) { return models.NewCIFARCNN([3]int{2, 8, 8}, 3, 4) },
		func() (models.Model, error) { return models.NewMLP([3]int{1, 4, 4}, []int{16}, 3, nn.ReLU, 3) },
	} {
		m, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(5, 6))
		base := append([]float32(nil), m.Params()...)
		lay := m.Layout()
		const zeta = 1e-3
		thr := make([]float64, len(lay)/2)
		for l := range thr {
			thr[l] = zeta
		}
		for trial := range 24 {
			scale := float32(math.Pow(10, float64(trial%4)))
			for j, v := range base {
				m.Params()[j] = v * scale
			}
			opt := Options{Norm: zeta, MaxBatch: 1}
			perLayer := trial%3 == 2
			if perLayer {
				opt = Options{PerLayer: thr, MaxBatch: 1}
			}
			e, err := New(m, opt)
			if err != nil {
				t.Fatal(err)
			}
			x := make([]float32, e.chw)
			v := rng.NormFloat64() * 1e3
			for j := range x {
				x[j] = float32(v + float64(trial%2)*rng.NormFloat64())
			}
			y := []int{rng.IntN(m.Classes())}
			out := make([]float32, m.NumParams())
			st, err := e.ClippedSum(x, y, out)
			if err != nil {
				t.Fatal(err)
			}
			if st.NonFinite > 0 {
				continue
			}
			if !perLayer {
				n := norm32(out)
				worst = max(worst, n/zeta)
				if n > zeta {
					t.Errorf("%s trial %d: clipped norm %.10g > zeta %v", m.Name(), trial, n, zeta)
				}
				continue
			}
			for l := 0; l < len(lay); l += 2 {
				n := norm32(out[lay[l].Offset : lay[l+1].Offset+lay[l+1].Len])
				worst = max(worst, n/zeta)
				if n > zeta {
					t.Errorf("%s trial %d layer %d: clipped norm %.10g > %v", m.Name(), trial, l/2, n, zeta)
				}
			}
		}
	}
	if worst < 0.99 {
		t.Errorf("largest clipped norm %v of zeta: the examples were not clipped", worst)
	}
	t.Logf("largest clipped norm / zeta = %.10f", worst)
}
