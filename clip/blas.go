package clip

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/gorgonia"
)

// UseBLAS32 routes the float32 BLAS calls of gonum's blas32 and of
// gorgonia graphs (models.Model.Build) through impl. The Engine itself no
// longer uses either: its executor (package nn) calls the project's own
// GEMM (package blas) directly. Like the functions it calls, it changes
// process-wide settings: call it once at start-up.
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
