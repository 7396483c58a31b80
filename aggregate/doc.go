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
// Releases are computed in exact arithmetic (docs/math.md, section 11):
// contributions on an integer grid, the encoded sums C X in 128-bit
// integers with exact discrete Gaussian noise (package noise), and the
// released floats decoded from those integers only, so that no
// floating-point rounding reveals a contribution (Mironov's attack on
// textbook float noise, which TestFloatingPointAttack runs). This needs
// the mechanism's dense encoder and decoder (Strategy.Matrices) and a
// causal decoder: tree-full, fft and fft-opt are refused.
//
// The noise mechanism is a value of the small Mechanism interface: a
// named dpcore.Strategy with the workload it decodes and the schema it was
// built for. Every privacy rule is the planner's (privacy.PlanRelease): the
// noise multiplier, the sensitivity under the enforced participation, the
// participation rule each contribution obeys, the epsilon spent and the
// ledger's claim. The aggregator computes and stores; it keeps no rule.
package aggregate
