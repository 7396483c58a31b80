package clip_test

import (
	"fmt"
	"log"
	"math"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/models"
	"github.com/dpmf-go/dpmf/nn"
)

func ExampleEngine_ClippedSum() {
	m, err := models.NewMLP([3]int{1, 4, 4}, []int{8}, 3, nn.ReLU, 1)
	if err != nil {
		log.Fatal(err)
	}
	// Clip every example's gradient to L2 norm 0.01; batches of up to 32.
	e, err := clip.New(m, clip.Options{Norm: 0.01, MaxBatch: 32})
	if err != nil {
		log.Fatal(err)
	}
	// A batch of 5 examples (Poisson sampling gives any size <= MaxBatch).
	x := make([]float32, 5*16)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	y := []int{0, 1, 2, 0, 1}
	sum := make([]float32, m.NumParams())
	st, err := e.ClippedSum(x, y, sum)
	if err != nil {
		log.Fatal(err)
	}
	n := 0.0
	for _, v := range sum {
		n += float64(v) * float64(v)
	}
	// Five clipped gradients sum to norm at most 5*0.01.
	fmt.Println(st.Examples, st.Clipped, math.Sqrt(n) <= 0.05*(1+1e-6))
	// Output: 5 1 true
}

func ExampleEngine_UserClippedSum() {
	m, err := models.NewMLP([3]int{1, 4, 4}, []int{8}, 3, nn.ReLU, 1)
	if err != nil {
		log.Fatal(err)
	}
	e, err := clip.New(m, clip.Options{Norm: 0.01, MaxBatch: 32})
	if err != nil {
		log.Fatal(err)
	}
	// Six examples of three users: 1, 3 and 2 examples, consecutive.
	x := make([]float32, 6*16)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	y := []int{0, 1, 2, 0, 1, 2}
	sum := make([]float32, m.NumParams())
	st, err := e.UserClippedSum(x, y, []int{1, 3, 2}, clip.UserOptions{}, sum)
	if err != nil {
		log.Fatal(err)
	}
	n := 0.0
	for _, v := range sum {
		n += float64(v) * float64(v)
	}
	// Each user's summed gradient is clipped as one: three users move the
	// sum by at most 3*0.01, whatever their numbers of examples.
	fmt.Println(st.Examples, st.Clipped, math.Sqrt(n) <= 0.03*(1+1e-6))
	// Output: 6 1 true
}

// An engine that forms each example's gradient itself (an adapter for
// another framework) clips through an Accumulator: Begin a batch, Add each
// example's float32 gradient with its loss, read the Stats. The rule (the
// clip factor with its margin, non-finite examples dropped and counted)
// is the Accumulator's; the engine writes none of it.
func ExampleAccumulator() {
	acc, err := clip.NewAccumulator(clip.Options{Norm: 1, MaxBatch: 4})
	if err != nil {
		log.Fatal(err)
	}
	grads := [][]float32{
		{0.3, 0.4},                // norm 0.5: kept as is
		{3, 4},                    // norm 5: scaled to norm 1 (less a 2^-20 margin)
		{float32(math.Inf(1)), 0}, // not finite: dropped, counted
		{1e30, 1e6},               // finite, however large: clipped
	}
	losses := []float64{0.7, 2.3, 1.1, 0.5}
	sum := make([]float32, 2)
	acc.Begin(sum, len(grads))
	for i, g := range grads {
		acc.Add(i, g, losses[i])
	}
	st := acc.Stats()
	fmt.Printf("sum %.4f\n", sum)
	fmt.Println("examples", st.Examples, "clipped", st.Clipped, "non-finite", st.NonFinite, "within norm", st.WithinNorm)
	fmt.Printf("max norm %.3g, mean loss %.3f\n", st.NormQuantiles[3], st.Loss)
	// Output:
	// sum [1.9000 1.2000]
	// examples 4 clipped 0.5 non-finite 1 within norm 1
	// max norm 1e+30, mean loss 1.167
}
