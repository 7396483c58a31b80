package data_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/data"
)

// Owners for user-level privacy: attach ids to any dataset, or deal a
// built-in one to synthetic users, and group the examples by user.
func ExampleDealOwners() {
	ds, _, err := data.Synthetic(1000, 1, data.Shape{C: 1, H: 2, W: 2}, 2, 1, 1)
	if err != nil {
		log.Fatal(err)
	}
	owners, err := data.DealOwners(ds.Len(), 50, 1, 1) // 50 users, skewed, seed 1
	if err != nil {
		log.Fatal(err)
	}
	if err := ds.SetOwners(owners); err != nil {
		log.Fatal(err)
	}
	us, err := ds.Users()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(us.Len(), "users, the largest with", us.MaxExamples(), "examples")
	// Output: 50 users, the largest with 117 examples
}
