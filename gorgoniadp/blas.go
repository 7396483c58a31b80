package gorgoniadp

import (
	"github.com/dpmf-go/dpmf/blas"
	"gorgonia.org/gorgonia"
)

// InstallBLAS makes the project's matrix products (blas.Implementation)
// the BLAS of gonum (blas.Install), of gorgonia and of gorgonia's tensor
// package, so that graphs on the per-example path run their products
// there. The compiled path (Model.Compiled) calls package blas directly
// and needs no installing. Like blas.Install it replaces process-wide
// settings: call it once from main before any concurrent linear algebra.
func InstallBLAS() {
	blas.Install()
	gorgonia.Use(blas.Implementation{}) // also calls tensor.Use
}
