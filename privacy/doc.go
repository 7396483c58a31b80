// Package privacy is the privacy plan of a run: which sampler realizes which
// participation schema, which mechanism adds noise with which sensitivity,
// whether amplification by sampling may be claimed, the accounting event
// that amounts to, the calibrated noise multiplier, and the ledger entry
// that records the guarantee with the one adjacency and every assumption it
// rests on. Training (package train), "train account" and services all ask
// it; no rule lives anywhere else.
//
// # Mechanisms
//
// A Mechanism is a typed value of package mfnoise, the package that owns
// the mathematics (DPSGD, Tree, FFT, MFSingle, MFKB, BandMF, Sqrt,
// BandedSqrt, BandedToeplitz, BLT, BISR, Stamped), or a caller's own
// CustomFactorization. It names itself, builds its strategy A = B C for
// the run's workload (Build), and declares its Structure — whether the
// noise is independent, how many bands its encoder has, whether the
// planner chooses them, whether it was optimized for fixed-order
// (k,b)-participation. The rules read
// that structure, never a name, so a new mechanism is one type and one
// line of ParseMechanism, the one parser of names (ParseMechanisms for a
// list), used by every command line and the service. mfnoise.Compare ranks
// any mechanism, a caller's CustomFactorization included, by the loss
// sens^2 ||B||_F^2.
//
// The plan holds one strategy (dpcore.Strategy, Plan.Strategy): the dense
// factorization, or the O(n) description of the Toeplitz families (DPSGD
// among them), whose sensitivity, loss and noise need no n x n matrix, so
// those runs may have any number of steps. The plan hands out noise
// sources (Plan.NoiseSource; package noise streams either kind) and the
// sensitivity of a prefix of the releases (Plan.PrefixSensitivity); the
// dense factorization is built only when asked for (Plan.Factorization),
// up to dpcore.DenseStepLimit steps.
//
// # The plan
//
// NewPlan takes a Request (mechanism, workload, examples, batch, steps,
// sampling, clip norm, sigma or a target epsilon, delta, accountant, seed)
// and returns the Plan and the sampler that realizes it, or a refusal. In
// order: the sampling follows the structure unless
// chosen (Poisson for DP-SGD, band sampling for a banded encoder, fixed-order
// epochs otherwise); bandmf:auto and toeplitz:auto choose their bands by
// amplified accounting under band sampling (banded-MF App. F.4) and by
// the loss under the sampler's schema under fixed-order epochs or
// shuffling (bands.go); CheckCompatible binds sampler, schema, bands and
// amplification (amplification only for Poisson or band sampling, and only
// for a banded encoder with no more bands than partitions, banded-MF Thm 4);
// the sensitivity is per participation when amplified and for the sampler's
// whole schema otherwise; sigma is given or calibrated (Composition); the
// noise's origin is stated and a guessable seed refused (NoiseAssumptions).
//
// A Composition is the accounting event as a function of sigma and the
// steps done: one Gaussian mechanism unamplified, T Poisson-subsampled
// Gaussians for DP-SGD, ceil(T/b) for band sampling. Plan.EpsilonAfter is
// the epsilon after t steps; Plan.EpsilonSpent bounds it cheaply for every
// step. The adjacency is zero-out for every plan (accountant.ZeroOut): the
// relation under which fixed-order and shuffled batches have the
// sensitivity package mfnoise computes, and which Poisson sampling's
// accounting covers.
//
// # Refusals
//
// Every refusal is a *Refusal: the Rule that refused (RuleCompatible,
// RuleAmplification, RuleBands, RuleBudget, RuleSeed, RuleSeparation, ...)
// and the Reason. It matches ErrRefused (and ErrIncompatible or
// ErrWeakSeed for those rules), so command lines and services branch with
// errors.As on the type and the rule, never on the text; bad arguments
// match dpcore.ErrInvalid instead.
//
// # Continual releases
//
// PlanRelease is the plan of a service that releases a workload of a
// vector sum at every step (package aggregate): from the mechanism's
// strategy, the horizon, the Participation it enforces (at most K steps,
// any two B apart), epsilon and delta, it computes the sensitivity under
// the participation's schema, the noise multiplier of one Gaussian
// mechanism (discrete on a Lattice, the exact arithmetic), the rule each
// contribution obeys (ReleasePlan.Admit), the epsilon spent after t
// releases (EpsilonSpent, from the prefix sensitivities) and the ledger's
// claim (Claim). The aggregator computes and stores; it holds no rule.
//
// # Questions without a run
//
// Account answers "train account": the epsilon at a noise multiplier, or
// the noise multiplier at an epsilon, of one Gaussian mechanism, DP-SGD or
// amplified BandMF (PoissonSampling, NewBandSampling with its band rule).
// GaussianSigma and GaussianEpsilon are the exact Gaussian rule that
// "train compare" and package audit use.
package privacy
