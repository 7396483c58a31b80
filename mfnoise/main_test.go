package mfnoise

import (
	"os"
	"testing"

	"github.com/dpmf-go/dpmf/blas"
)

// TestMain installs the fast GEMM, as cmd/train does: the optimizers'
// Cholesky factorizations, triangular solves and inverses run through
// gonum's lapack on the process-wide BLAS, and the paper-scale tests and
// benchmarks measure the configuration users run.
func TestMain(m *testing.M) {
	blas.Install()
	os.Exit(m.Run())
}
