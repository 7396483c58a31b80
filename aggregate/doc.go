// Package aggregate provides private continual-release aggregates for
// services: a vector sum (with an optional count and mean built on it) over
// contributions that arrive concurrently, released at every step as a
// differentially private prefix sum, exponentially weighted (momentum) sum
// or sliding-window sum, with the correlated noise of a matrix-factorization
// mechanism (SPEC 2-6, Denisov et al. 2022).
//
// The Aggregator enforces contribution bounding itself (L2 clipping to the
// clip norm; each contributor id joins at most K steps, any two at least B
// steps apart: the (k,b)-min-separation schema the sensitivity is computed
// for), calibrates the noise multiplier to a target (epsilon, delta) over a
// stated horizon, keeps a live ledger that refuses any release past the
// budget, and stores everything in an embedded bbolt database so that a
// crash at any point loses no acknowledged contribution, counts none twice,
// and never repeats or re-draws a release or reuses a noise row.
//
// The noise mechanism is a value of the small Mechanism interface (a
// unit-scale noise stream plus its sensitivity), so mechanisms beyond the
// factorizations of package mfnoise plug in without changing the
// aggregator.
package aggregate
