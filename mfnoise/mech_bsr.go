package mfnoise

import (
	"context"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise/internal/guard"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
)

// BandedSqrt is the banded square root (bsr:BANDS; Kalinin and Lampert
// 2024, BSR): the Toeplitz square root of the prefix sum, c_j = C(2j, j) /
// 4^j, truncated to its first Bands coefficients. Its encoder is banded, so
// band sampling and amplified accounting apply (banded-MF Thm 4); its
// coefficients are positive and decreasing, so its sensitivity is exact
// under every schema. bsr:n is the square root itself.
type BandedSqrt struct{ Bands int }

func (m BandedSqrt) String() string { return "bsr:" + strconv.Itoa(m.Bands) }

// Structure: b-banded.
func (m BandedSqrt) Structure() Structure { return Structure{Bands: m.Bands} }

// Build is the closed form, in O(b) memory for the encoder.
func (m BandedSqrt) Build(ctx context.Context, w dpcore.Workload, schema dpcore.Schema, _ BuildOptions) (dpcore.Strategy, error) {
	return closedForm(ctx, m.String(), w, schema, func() (*toeplitz.Encoder, error) {
		if m.Bands < 1 || m.Bands > w.N {
			return nil, guard.Invalidf("build %s: %d bands, need 1..n = %d", m, m.Bands, w.N)
		}
		c := make([]float64, m.Bands)
		c[0] = 1
		for j := 1; j < m.Bands; j++ {
			c[j] = c[j-1] * (float64(j) - 0.5) / float64(j)
		}
		return toeplitz.New(m.String(), w.N, c)
	})
}

// NoiseCost: b - 1 stored rows and the output.
func (BandedSqrt) NoiseCost(s dpcore.Strategy, _ int) (float64, string) { return toeplitzCost(s) }
