// Package accountant computes the (epsilon, delta) differential-privacy
// guarantees of the noise mechanisms used for private training, and
// calibrates their noise multipliers to a target guarantee.
//
// A mechanism is described by an Event: a Gaussian mechanism with
// sensitivity 1 and noise standard deviation sigma, optionally Poisson
// subsampled, and composed. Three ways to account for an Event are offered:
//
//   - the exact Gaussian formula of Balle & Wang (2018), which is the whole
//     accounting of an unamplified matrix-factorization mechanism whose
//     sensitivity is normalized to 1 (GaussianEpsilon, GaussianDelta,
//     GaussianSigma);
//   - Rényi DP (NewRDP) for Poisson-subsampled Gaussians at integer and
//     fractional orders (Mironov, Talwar & Zhang 2019), converted to
//     (epsilon, delta) with the bound of Canonne, Kamath & Steinke (2020);
//   - a privacy loss distribution accountant (NewPLD) that discretizes the
//     privacy loss pessimistically ("connect the dots", Doroshenko et al.
//     2022), composes by FFT, and reports the maximum over the add and remove
//     directions. It is the tighter of the two and is what the
//     matrix-factorization papers report.
//
// A guarantee is stated for one Adjacency, recorded once in its
// LedgerEntry: zero-out, as in the papers, for every run the planner
// builds (package privacy). DPSGDEvent and
// BandMFEvent build the events of Poisson-sampled DP-SGD and of banded
// matrix factorization with partitioned band sampling (amplified BandMF,
// Choquette-Choo et al. 2023, Thm. 4); Calibrate finds the smallest noise
// multiplier meeting a target, and SelectBands chooses the number of bands
// as in App. F.4 of that paper. A LedgerEntry records one run's guarantee
// with the assumptions it rests on. SelectionEpsilon accounts private
// selection, the best of a random number of runs (Papernot & Steinke
// 2022), as dp_accounting accounts a RepeatAndSelectDpEvent.
package accountant
