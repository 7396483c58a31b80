package noise_test

import (
	"fmt"
	"log"
	"math/big"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/noise"
)

// Exact integer noise for an integer release: rows of N_Z(0, 10^6), drawn
// from a fixed seed here (reproducible, not private: use nil).
func ExampleNewExactRows() {
	seed := new(dpcore.Seed)
	rows, err := noise.NewExactRows(3, 4, big.NewRat(1000000, 1), seed)
	if err != nil {
		log.Fatal(err)
	}
	z := make([]*big.Int, 4)
	if err := rows.Next(z); err != nil {
		log.Fatal(err)
	}
	small := true
	for _, v := range z {
		small = small && v.IsInt64() && v.Int64() > -10000 && v.Int64() < 10000
	}
	fmt.Println("rows drawn:", rows.Step(), "all within 10 sigma:", small)
	// Output: rows drawn: 1 all within 10 sigma: true
}
