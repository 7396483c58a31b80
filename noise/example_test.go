package noise_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/mfnoise/toeplitz"
	"github.com/dpmf-go/dpmf/noise"
	"gonum.org/v1/gonum/mat"
)

// A 2-banded encoder for 4 steps of SGD, streamed with one buffered row.
func ExampleNew() {
	const n, d = 4, 10
	w, err := dpcore.PrefixSum(n)
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
	src, err := noise.New(f, d, noise.Options{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(src.Kind(), src.MemoryBytes(), "bytes")

	noiseRow := make([]float32, d)
	for src.Step() < 2 {
		if err := src.Next(noiseRow); err != nil {
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
	resumed, _ := noise.New(f, d, noise.Options{})
	if err := resumed.UnmarshalBinary(state); err != nil {
		log.Fatal(err)
	}
	for resumed.Step() < resumed.N() {
		if err := resumed.Next(noiseRow); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("steps:", resumed.Step(), "more:", resumed.Next(noiseRow) == nil)
	// Output:
	// banded 72 bytes
	// steps: 4 more: false
}

// A BLT with 2 buffers over 1000 steps streams its noise for a model of 10
// coordinates with 2 d-vectors of state, whatever n: no n x n matrix is
// formed.
func ExampleNewToeplitz() {
	blt, err := toeplitz.NewBLT("blt:2", 1000, toeplitz.BLTParams{Theta: []float64{0.9, 0.5}, Omega: []float64{0.3, 0.2}})
	if err != nil {
		log.Fatal(err)
	}
	src, err := noise.NewToeplitz(blt, 10, noise.Options{}) // CSPRNG seed
	if err != nil {
		log.Fatal(err)
	}
	z := make([]float32, 10)
	for range 3 {
		if err := src.Next(z); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("%s source after %d of %d steps keeps %d bytes\n", src.Kind(), src.Step(), src.N(), src.MemoryBytes())
	// Output:
	// blt-buffers source after 3 of 1000 steps keeps 112 bytes
}
