package gorgoniadp

import (
	"testing"

	"github.com/dpmf-go/dpmf/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

var _ gorgonia.BLAS = blas.Implementation{}

// TestInstallBLAS checks that InstallBLAS registers the project's BLAS
// with gonum, gorgonia and gorgonia's tensor package.
func TestInstallBLAS(t *testing.T) {
	defer func() {
		blas32.Use(gonum.Implementation{})
		blas64.Use(gonum.Implementation{})
		gorgonia.Use(gonum.Implementation{})
	}()
	InstallBLAS()
	if _, ok := blas32.Implementation().(blas.Implementation); !ok {
		t.Errorf("blas32 uses %T", blas32.Implementation())
	}
	if _, ok := blas64.Implementation().(blas.Implementation); !ok {
		t.Errorf("blas64 uses %T", blas64.Implementation())
	}
	if _, ok := tensor.WhichBLAS().(blas.Implementation); !ok {
		t.Errorf("tensor uses %T", tensor.WhichBLAS())
	}
	if _, ok := gorgonia.WhichBLAS().(blas.Implementation); !ok {
		t.Errorf("gorgonia uses %T", gorgonia.WhichBLAS())
	}
}
