package nn_test

import (
	"fmt"
	"math"

	"github.com/dpmf-go/dpmf/nn"
)

func ExampleFirstNonFinite() {
	params := make([]float32, 3000)
	fmt.Println(nn.FirstNonFinite(params))
	params[2500] = float32(math.Inf(-1))
	params[2700] = float32(math.NaN())
	fmt.Println(nn.FirstNonFinite(params))
	// Output:
	// -1
	// 2500
}
