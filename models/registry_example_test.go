package models_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/models"
)

// A model named as on train's command line (-model mlp -hidden 16),
// built for 1x4x4 inputs and 3 classes.
func ExampleNamed() {
	n := models.Named{Name: "mlp", Hidden: []int{16}}
	m, err := n.Build([3]int{1, 4, 4}, 3, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.NumParams(), n.EstimateParams(16, 3))
	fmt.Println(models.Names())
	// Output:
	// 323 323
	// [logistic mlp cnn cnn-small wrn16-4 tabular scatternet]
}
