package mfnoise_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/mfnoise"
	"gonum.org/v1/gonum/mat"
)

// A 2-banded encoder for 4 steps of SGD, streamed with one buffered row.
func ExampleNewNoiseSource() {
	const n, d = 4, 10
	w, err := mfnoise.PrefixSum(n)
	if err != nil {
		log.Fatal(err)
	}
	// C[i,i] = 1, C[i,i-1] = 0.5; decoder B = A C^-1.
	c := mat.NewDense(n, n, nil)
	for i := range n {
		c.Set(i, i, 1)
		if i > 0 {
			c.Set(i, i-1, 0.5)
		}
	}
	a, _ := w.Matrix()
	var cinv, b mat.Dense
	if err := cinv.Inverse(c); err != nil {
		log.Fatal(err)
	}
	b.Mul(a, &cinv)
	f, err := mfnoise.NewFactorization(w, c, &b, mfnoise.Metadata{Kind: "bandmf", Bands: 2})
	if err != nil {
		log.Fatal(err)
	}

	// The default seed comes from crypto/rand.
	src, err := mfnoise.NewNoiseSource(f, d, mfnoise.NoiseOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(src.Kind(), src.MemoryBytes(), "bytes")

	noise := make([]float32, d)
	for src.Step() < 2 {
		if err := src.Next(noise); err != nil {
			log.Fatal(err)
		}
		// The trainer adds sigma * clip norm * sensitivity * noise to the
		// clipped gradient sum here.
	}
	// Checkpoint, and resume in a fresh source built for the same mechanism.
	state, err := src.MarshalBinary()
	if err != nil {
		log.Fatal(err)
	}
	resumed, _ := mfnoise.NewNoiseSource(f, d, mfnoise.NoiseOptions{})
	if err := resumed.UnmarshalBinary(state); err != nil {
		log.Fatal(err)
	}
	for resumed.Step() < resumed.N() {
		if err := resumed.Next(noise); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("steps:", resumed.Step(), "more:", resumed.Next(noise) == nil)
	// Output:
	// banded 72 bytes
	// steps: 4 more: false
}
