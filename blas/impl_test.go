package blas

import (
	"math/rand/v2"
	"testing"

	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
	"gonum.org/v1/gonum/mat"
)

// restoreGonum puts gonum's native BLAS back everywhere Install changed.
func restoreGonum() {
	blas32.Use(gonum.Implementation{})
	blas64.Use(gonum.Implementation{})
}

func TestInstall(t *testing.T) {
	defer restoreGonum()
	Install()
	if _, ok := blas64.Implementation().(Implementation); !ok {
		t.Errorf("blas64 uses %T", blas64.Implementation())
	}
	if _, ok := blas32.Implementation().(Implementation); !ok {
		t.Errorf("blas32 uses %T", blas32.Implementation())
	}
	// A product through gonum's mat now runs here and must agree with
	// the native one.
	rng := rand.New(rand.NewPCG(9, 9))
	a := mat.NewDense(70, 90, nil)
	b := mat.NewDense(90, 80, nil)
	for i := range 70 {
		for j := range 90 {
			a.Set(i, j, rng.NormFloat64())
		}
	}
	for i := range 90 {
		for j := range 80 {
			b.Set(i, j, rng.NormFloat64())
		}
	}
	var got, want mat.Dense
	got.Mul(a, b)
	restoreGonum()
	want.Mul(a, b)
	if !mat.EqualApprox(&got, &want, 1e-12) {
		t.Error("mat.Mul after Install differs from gonum's")
	}
}

// BenchmarkLapack measures gonum's Cholesky factorization and dense
// inverse (used by the factorization optimizers) with gonum's native BLAS
// and after Install.
func BenchmarkLapack(b *testing.B) {
	const n = 1000
	rng := rand.New(rand.NewPCG(3, 4))
	g := mat.NewDense(n, n, nil)
	for i := range n {
		for j := range n {
			g.Set(i, j, rng.NormFloat64())
		}
	}
	var spd mat.SymDense
	spd.SymOuterK(1, g)
	for i := range n {
		spd.SetSym(i, i, spd.At(i, i)+float64(n))
	}
	defer restoreGonum()
	for _, impl := range []string{"gonum", "dpmf"} {
		b.Run("Cholesky/"+impl, func(b *testing.B) {
			restoreGonum()
			if impl == "dpmf" {
				Install()
			}
			var ch mat.Cholesky
			for b.Loop() {
				if !ch.Factorize(&spd) {
					b.Fatal("not positive definite")
				}
			}
		})
		b.Run("Inverse/"+impl, func(b *testing.B) {
			restoreGonum()
			if impl == "dpmf" {
				Install()
			}
			var inv mat.Dense
			for b.Loop() {
				if err := inv.Inverse(g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEigenSym measures gonum's symmetric eigendecomposition (what
// the factorization optimizers call) with gonum's native BLAS and after
// Install.
func BenchmarkEigenSym(b *testing.B) {
	const n = 1000
	rng := rand.New(rand.NewPCG(1, 2))
	s := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			s.SetSym(i, j, rng.NormFloat64())
		}
	}
	defer restoreGonum()
	for _, impl := range []string{"gonum", "dpmf"} {
		b.Run(impl, func(b *testing.B) {
			restoreGonum()
			if impl == "dpmf" {
				Install()
			}
			var e mat.EigenSym
			for b.Loop() {
				if !e.Factorize(s, true) {
					b.Fatal("EigenSym failed")
				}
			}
		})
	}
}
