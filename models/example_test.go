package models_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/models"
)

func ExampleNewMLP() {
	// A 784-100-10 tanh network for 28x28 grey-scale images.
	m, err := models.NewMLP([3]int{1, 28, 28}, []int{100}, 10, "tanh", 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Name(), m.NumParams())
	for _, p := range m.Layout() {
		fmt.Println(p.Name, p.Shape, p.Offset)
	}
	// Output:
	// mlp 79510
	// dense0/w [784 100] 0
	// dense0/b [100] 78400
	// dense1/w [100 10] 78500
	// dense1/b [10] 79500
}
