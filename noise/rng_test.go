package noise

import (
	"math"
	mrand "math/rand/v2"
	"slices"
	"testing"
)

func TestZigguratTable(t *testing.T) {
	// The layers must tile: the last computed edge is near 0 and every
	// layer has area V.
	x := zig.x
	if !(x[zigN-1] > 0 && x[zigN-1] < 0.3) {
		t.Fatalf("x[255] = %v, want a small positive edge", x[zigN-1])
	}
	for i := 1; i < zigN-1; i++ {
		area := x[i] * (zig.f[i+1] - zig.f[i])
		if math.Abs(area-zigV) > 1e-12 {
			t.Fatalf("layer %d area %v, want %v", i, area, zigV)
		}
	}
}

// normalCDF is Phi.
func normalCDF(x float64) float64 { return 0.5 * math.Erfc(-x/math.Sqrt2) }

// ksStat returns the Kolmogorov-Smirnov statistic of xs against Phi.
func ksStat(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := float64(len(s))
	d := 0.0
	for i, v := range s {
		c := normalCDF(v)
		d = max(d, math.Abs(c-float64(i)/n), math.Abs(float64(i+1)/n-c))
	}
	return d
}

func TestNormalMarginalsKS(t *testing.T) {
	// Fixed seed; at n = 2e5 the 0.1% critical value of the KS statistic is
	// 1.95/sqrt(n) = 0.00436.
	const n = 200000
	xs := make([]float64, n)
	g := mrand.NewChaCha8([32]byte{7})
	fillNormal(g, xs)
	if d := ksStat(xs); d > 1.95/math.Sqrt(n) {
		t.Fatalf("KS statistic %v exceeds the 0.1%% critical value %v", d, 1.95/math.Sqrt(n))
	}
	// Tails: P(|Z| > R) and P(|Z| > 2) within 5 standard errors.
	for _, c := range []float64{1, 2, zigR, 4} {
		p := 2 * normalCDF(-c)
		cnt := 0
		for _, v := range xs {
			if math.Abs(v) > c {
				cnt++
			}
		}
		se := math.Sqrt(p * (1 - p) / n)
		if got := float64(cnt) / n; math.Abs(got-p) > 5*se+1/float64(n) {
			t.Fatalf("P(|Z| > %v) = %v, want %v +- %v", c, got, p, 5*se)
		}
	}
	// Moments: mean 0, variance 1, fourth moment 3.
	var m1, m2, m4 float64
	for _, v := range xs {
		m1 += v
		m2 += v * v
		m4 += v * v * v * v
	}
	m1, m2, m4 = m1/n, m2/n, m4/n
	if math.Abs(m1) > 5/math.Sqrt(n) || math.Abs(m2-1) > 5*math.Sqrt(2.0/n) || math.Abs(m4-3) > 5*math.Sqrt(96.0/n) {
		t.Fatalf("moments mean %v var %v m4 %v, want 0, 1, 3", m1, m2, m4)
	}
}

func TestNormalFloat32MatchesFloat64(t *testing.T) {
	a := make([]float64, 1000)
	b := make([]float32, 1000)
	fillNormal(mrand.NewChaCha8([32]byte{1}), a)
	fillNormal(mrand.NewChaCha8([32]byte{1}), b)
	for i := range a {
		if b[i] != float32(a[i]) {
			t.Fatalf("sample %d: float32 %v, float64 %v", i, b[i], a[i])
		}
	}
}

func TestShardsIndependentOfWorkersAndKeys(t *testing.T) {
	ks, _ := rowKeys(key{3}, 3)
	d := 2*shardLen + 17
	r1 := make([]float64, d)
	r2 := make([]float64, d)
	genRow(ks[0], r1)
	genRow(ks[1], r2)
	if r1[0] == r2[0] || r1[shardLen] == r1[0] || r1[shardLen] == r2[shardLen] {
		t.Fatalf("rows or shards share a stream")
	}
	// Regenerating gives the same values.
	r3 := make([]float64, d)
	genRow(ks[0], r3)
	if !slices.Equal(r1, r3) {
		t.Fatalf("regenerated row differs")
	}
}

func BenchmarkGaussian(b *testing.B) {
	buf := make([]float32, 1<<15)
	g := mrand.NewChaCha8([32]byte{})
	for b.Loop() {
		fillNormal(g, buf)
	}
	b.ReportMetric(float64(b.N)*float64(len(buf))/b.Elapsed().Seconds()/1e6, "Msamples/s")
}
