package data

import (
	"math"
	mrand "math/rand/v2"
	"slices"
)

// SetOwners attaches an owner (user) id to every example: owners[i] owns
// example i. Ids are any int64 values; examples with the same id belong to
// the same user. The slice is kept, not copied. A nil owners detaches them.
func (d *Dataset) SetOwners(owners []int64) error {
	if owners != nil && len(owners) != d.Len() {
		return invalidf("set owners: %d owner ids for %d examples", len(owners), d.Len())
	}
	d.Owners = owners
	return nil
}

// Users groups the examples by owner. It is a compressed index: user u
// (0 <= u < Len) owns the examples Examples[Start[u]:Start[u+1]], in
// increasing order; users are numbered by their first example. ID[u] is
// user u's owner id.
type Users struct {
	Start    []int
	Examples []int
	ID       []int64
}

// Len is the number of users.
func (u *Users) Len() int { return len(u.ID) }

// Of returns the examples of user k (a view, not a copy).
func (u *Users) Of(k int) []int { return u.Examples[u.Start[k]:u.Start[k+1]:u.Start[k+1]] }

// MaxExamples is the largest number of examples one user owns.
func (u *Users) MaxExamples() int {
	m := 0
	for k := range u.ID {
		m = max(m, u.Start[k+1]-u.Start[k])
	}
	return m
}

// Users returns the examples grouped by owner, or an error when the
// dataset has no owners (SetOwners).
func (d *Dataset) Users() (*Users, error) {
	if d.Owners == nil {
		return nil, invalidf("users: the dataset %q has no owner ids (attach them with SetOwners, a CSV user column or a synthetic assignment)", d.Name)
	}
	if len(d.Owners) != d.Len() {
		return nil, invalidf("users: %d owner ids for %d examples", len(d.Owners), d.Len())
	}
	idx := make(map[int64]int)
	var ids []int64
	count := []int{}
	user := make([]int, d.Len())
	for i, o := range d.Owners {
		k, ok := idx[o]
		if !ok {
			k = len(ids)
			idx[o] = k
			ids = append(ids, o)
			count = append(count, 0)
		}
		user[i] = k
		count[k]++
	}
	u := &Users{Start: make([]int, len(ids)+1), Examples: make([]int, d.Len()), ID: ids}
	for k, c := range count {
		u.Start[k+1] = u.Start[k] + c
	}
	next := slices.Clone(u.Start[:len(ids)])
	for i, k := range user {
		u.Examples[next[k]] = i
		next[k]++
	}
	return u, nil
}

// DealOwners is the synthetic owner assignment of the built-in data sets,
// for user-level experiments: n examples are dealt to users (ids 0 to
// users-1) so that each user owns at least one and the numbers are skewed.
// User u's share is proportional to exp(skew * z_u), z_u standard normal
// (a log-normal spread: skew 0 deals equal shares; skew 1 dealing
// 60,000 examples to 6,000 users gives a median of 7, a 99th percentile
// of 55 and a largest user of 213 examples, mean 10); every user first gets
// one example and the rest is split by largest remainders. Which examples
// a user gets is a uniformly random choice. Everything is fixed by seed,
// so an assignment is reproducible and independent of the training run's
// randomness.
func DealOwners(n, users int, skew float64, seed uint64) ([]int64, error) {
	if users <= 0 || users > n {
		return nil, invalidf("deal owners: %d users for %d examples (want 1 to %d)", users, n, n)
	}
	if !(skew >= 0) || skew > 10 {
		return nil, invalidf("deal owners: skew %v, want 0 to 10", skew)
	}
	rng := mrand.New(mrand.NewPCG(seed, 0x0d1e5))
	w := make([]float64, users)
	tot := 0.0
	for u := range w {
		w[u] = math.Exp(skew * rng.NormFloat64())
		tot += w[u]
	}
	rest := n - users
	size := make([]int, users)
	frac := make([]float64, users)
	given := 0
	for u := range w {
		share := float64(rest) * w[u] / tot
		size[u] = 1 + int(share)
		frac[u] = share - math.Floor(share)
		given += size[u]
	}
	order := make([]int, users)
	for u := range order {
		order[u] = u
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case frac[a] > frac[b]:
			return -1
		case frac[a] < frac[b]:
			return 1
		}
		return 0
	})
	for k := 0; given < n; k++ {
		size[order[k%users]]++
		given++
	}
	perm := rng.Perm(n)
	owners := make([]int64, n)
	p := 0
	for u, s := range size {
		for range s {
			owners[perm[p]] = int64(u)
			p++
		}
	}
	return owners, nil
}
