package blas_test

import (
	"fmt"

	gblas "gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/mat"

	"github.com/dpmf-go/dpmf/blas"
)

// Multiply a 2×3 matrix by a 3×2 matrix, both row-major.
func ExampleSgemm() {
	a := []float32{
		1, 2, 3,
		4, 5, 6,
	}
	b := []float32{
		7, 8,
		9, 10,
		11, 12,
	}
	c := make([]float32, 2*2)
	// c = 1*a*b + 0*c
	blas.Sgemm(gblas.NoTrans, gblas.NoTrans, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2)
	fmt.Println(c)
	// Output: [58 64 139 154]
}

// Install makes gonum's mat package use this package's matrix products.
func ExampleInstall() {
	blas.Install()
	a := mat.NewDense(2, 2, []float64{1, 2, 3, 4})
	var c mat.Dense
	c.Mul(a, a.T())
	fmt.Println(mat.Formatted(&c))
	// Output:
	// ⎡ 5  11⎤
	// ⎣11  25⎦
}
