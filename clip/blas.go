package clip

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/gorgonia"
)

// UseBLAS32 routes every float32 BLAS call of training through impl: the
// engine's own products (gonum's blas32) and gorgonia's forward and
// backward matrix products (gorgonia.Use, which blas32.Use alone does not
// reach). Other precisions keep gonum's implementation. Like the functions
// it calls, it changes process-wide settings: call it once at start-up,
// before any Engine runs.
func UseBLAS32(impl blas.Float32) {
	blas32.Use(impl)
	gorgonia.Use(mixedBLAS{impl, gonum.Implementation{}, gonum.Implementation{}, gonum.Implementation{}})
}

// mixedBLAS is a full gorgonia.BLAS whose float32 part is replaced.
type mixedBLAS struct {
	blas.Float32
	blas.Float64
	blas.Complex64
	blas.Complex128
}
