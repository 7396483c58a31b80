package main

import (
	"flag"
	"github.com/dpmf-go/dpmf/privacy"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/train"
)

// userFlags are the flags of user-level runs (train run, train audit).
type userFlags struct {
	level    bool
	examples int
	mean     bool
	users    int
	skew     float64
}

// syntheticOwnerSeed fixes the synthetic owner assignment of -users, so
// that every run of an experiment deals the same examples to the same
// users.
const syntheticOwnerSeed = 1

func (u *userFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&u.level, "user-level", false, "protect users, not examples: sample users, bound each user's contribution (-user-examples, -user-mean) and claim privacy per user; needs owner ids (-user COLUMN for -data csv, -users N otherwise)")
	fs.IntVar(&u.examples, "user-examples", 1, "-user-level: at most this many examples of a sampled user enter a step (chosen with secret randomness when it has more); their gradient sum is clipped as one")
	fs.BoolVar(&u.mean, "user-mean", false, "-user-level: clip the mean of a user's gradients instead of their sum")
	fs.IntVar(&u.users, "users", 0, "built-in data: deal the training examples to N synthetic users with skewed counts (data.DealOwners, seed 1, -user-skew), for user-level experiments")
	fs.Float64Var(&u.skew, "user-skew", 1, "-users: log-normal spread of the users' example counts (0: equal)")
}

// apply attaches the synthetic owners and sets the user-level knobs.
func (u *userFlags) apply(cfg *train.Config) error {
	if u.users > 0 {
		if cfg.Data.Train.Owners != nil {
			return usagef("-users deals synthetic owners; the data already has owner ids (-user COLUMN)")
		}
		owners, err := data.DealOwners(cfg.Data.Train.Len(), u.users, u.skew, syntheticOwnerSeed)
		if err != nil {
			return usagef("-users %d: %v", u.users, err)
		}
		ds := *cfg.Data.Train
		ds.Owners = owners
		cfg.Data.Train = &ds
	} else if u.users < 0 {
		return usagef("-users %d must not be negative", u.users)
	}
	if u.level {
		if cfg.Data.Train.Owners == nil {
			return usagef("-user-level needs owner ids: -user COLUMN (for -data csv) or -users N (a synthetic assignment)")
		}
		if u.examples < 1 {
			return usagef("-user-examples %d must be at least 1", u.examples)
		}
		cfg.Privacy.UserBound = &privacy.UserBound{Examples: u.examples, Mean: u.mean}
	} else if u.mean {
		return usagef("-user-mean applies to -user-level runs only")
	}
	return nil
}
