package accountant

import "testing"

// q = 0.01, T = 2000, sigma = 0.6 (eps about 7 at delta 1e-6).
func BenchmarkPLDEpsilon(b *testing.B) {
	pld := NewPLD(PLDOptions{})
	e, _ := DPSGDEvent(0.6, 0.01, 2000)
	for b.Loop() {
		if _, err := pld.Epsilon(e, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

// sigma for eps = 8, delta = 1e-6 at q = 0.01, T = 2000.
func BenchmarkPLDCalibrate(b *testing.B) {
	pld := NewPLD(PLDOptions{})
	for b.Loop() {
		if _, err := Calibrate(pld, func(s float64) (Event, error) { return DPSGDEvent(s, 0.01, 2000) }, 8, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

// sigma for eps = 8, delta = 1e-6 at q = 0.01, T = 10^6.
func BenchmarkRDPCalibrate(b *testing.B) {
	rdp := NewRDP(nil)
	for b.Loop() {
		if _, err := Calibrate(rdp, func(s float64) (Event, error) { return DPSGDEvent(s, 0.01, 1000000) }, 8, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRDPEpsilon(b *testing.B) {
	rdp := NewRDP(nil)
	e, _ := DPSGDEvent(1, 0.01, 1000000)
	for b.Loop() {
		if _, err := rdp.Epsilon(e, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPLDEpsilonStackOverflow(b *testing.B) {
	pld := NewPLD(PLDOptions{})
	e, _ := DPSGDEvent(0.5037, soQ, soSteps)
	for b.Loop() {
		if _, err := pld.Epsilon(e, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGaussianSigma(b *testing.B) {
	for b.Loop() {
		if _, err := GaussianSigma(8, 1e-6); err != nil {
			b.Fatal(err)
		}
	}
}

// sigma for eps = 3, delta = 1e-5 under random allocation over t = 20
// steps, 30 epochs (the ScatterNet recipe: 60,000 examples, batch 3000,
// 600 steps).
func BenchmarkAllocationCalibrate(b *testing.B) {
	for b.Loop() {
		pld := NewPLD(PLDOptions{})
		c, err := Calibrate(pld, func(s float64) (Event, error) { return DPSGDAllocationEvent(s, 20, 600) }, 3, 1e-5)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(c.Evaluations), "evals")
		b.ReportMetric(c.Sigma, "sigma")
	}
}
