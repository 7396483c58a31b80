package dpcore_test

import (
	"fmt"
	"log"

	"github.com/dpmf-go/dpmf/dpcore"
)

// The workload of heavy-ball momentum 0.9 with the papers' linear cooldown
// over 4 steps, and the participation schema of 2 epochs of 3 batches.
func ExampleMomentumWorkload() {
	w, err := dpcore.MomentumWorkload(4, 0.9, dpcore.CooldownSchedule(4, 0.5, 0.05))
	if err != nil {
		log.Fatal(err)
	}
	rates, _ := w.Schedule.Rates(w.N)
	a, _ := w.Matrix()
	fmt.Printf("%v rates %.2f\n", w, rates)
	fmt.Printf("A[3,0] = 1 + 0.9 + 0.81 + 0.05*0.729 = %.5f\n", a.At(3, 0))
	s, _ := dpcore.KBParticipation(2, 3)
	fmt.Println(s, s.Patterns(6))
	// Output:
	// momentum(n=4,beta=0.9) rates [1.00 1.00 1.00 0.05]
	// A[3,0] = 1 + 0.9 + 0.81 + 0.05*0.729 = 2.74645
	// kb(k=2,b=3) [[0 3] [1 4] [2 5]]
}

// A run's seed (any phrase, stated in the claim) gives each consumer of
// randomness its own typed 32-byte seed; without one every consumer draws
// from crypto/rand (nil). The seed is SHA-256(phrase, 0, label): here
// 8003e4c7... as Python's hashlib computes it.
func ExampleDeriveSeed() {
	s := dpcore.DeriveSeed([]byte("my reproducible run"), "sampler")
	fmt.Printf("%x\n", s[:4])
	fmt.Println(dpcore.DeriveSeed(nil, "sampler") == nil)
	_, ok := dpcore.SeedOf([]byte("too short"))
	fmt.Println(ok)
	// Output:
	// 8003e4c7
	// true
	// false
}
