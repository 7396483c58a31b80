// Package audit computes empirical lower bounds on epsilon from one training
// run: privacy auditing with one training run (Steinke, Nasr & Jagielski
// 2023). A proof says a run is at most (eps, delta)-DP; an audit measures,
// on the running system, an eps it is at least. A lower bound above the
// claimed epsilon means the system is broken: a wrong noise scale, a
// sensitivity computed for the wrong participation, a sampler that does not
// do what the accounting assumes.
//
// The game: m canaries are each included independently with probability
// 1/2; after the run every canary gets a score; the k+ highest are guessed
// IN, the k- lowest OUT, the rest abstain; the number of correct guesses
// turns into a lower bound at confidence 1 - beta by the exact binomial tail
// of Steinke et al.'s Theorem 3.1 (PValue, EpsilonLowerBound, FromScores).
// The thresholds (k+, k-) come from a fixed grid tested with a Bonferroni
// correction by default, so the bound holds at the stated confidence; the
// uncorrected best-of-grid that papers report is available and labelled.
// For claims that are Gaussian-shaped (an unamplified matrix mechanism is
// (1/sigma)-GDP) the f-DP reading of Mahloujifar et al. 2024 (GDPRejects,
// GDPFromScores) tests the claim directly and is much tighter.
//
// Canaries (package train builds both on its own trainer):
//   - white-box gradient canaries (Whitebox): canary j contributes a fixed
//     gradient of norm zeta (the clip norm) along coordinate e_{c_j} of its
//     own, whenever the sampler puts it in a batch, and the adversary sees
//     every released noisy update — the strongest adversary the guarantee
//     covers. Coordinates are distinct, so canaries do not interfere.
//   - black-box input canaries: mislabelled examples, scored by their loss
//     under the final model only (FromScores on those scores). They are
//     zero-out canaries, as the claim's adjacency is: every canary is in
//     the data set and an OUT one contributes zero when sampled, so the
//     number of examples, the sampling rate and delta do not depend on
//     which canaries are IN.
//
// One flag. Check tests a claim at the stated confidence: when it has two
// readings (epsilon, and for a Gaussian-shaped claim mu-GDP) each is made
// at half the error probability, so that the one flag, their union, holds
// at the confidence.
//
// Correlated noise. A matrix mechanism adds W = G Z to the gradient stream
// (G = A^-1 B; C^-1 for a square encoder, C^+ for a tall encoder with the
// optimal decoder), so along one coordinate the n noise values of a run are
// correlated with covariance s^2 G G^T. Scoring a canary by summing its
// coordinate over the steps, as one does for DP-SGD, lets the correlated
// noise swamp the signal (for a tree the root's noise enters every step).
// Whitebox therefore whitens the stream with the mechanism's own noise
// correlation: it scores with the precision matrix P = (G G^T)^-1, which is
// C^T C for a square encoder and for the optimal decoder of a tall one —
// applying the encoder C turns the noise back into the i.i.d. Z the privacy
// proof is about. The whitened statistic of a canary whose steps are known
// is exactly the privacy proof's Gaussian mechanism: N(mu, 1) with mu <=
// 1/sigma if IN, N(0, 1) if OUT. Anything weaker leaves the audit
// needlessly loose; anything else would not be the mechanism's own noise.
//
// What the adversary may know depends on the accounting: under unamplified
// accounting the batches may be public, so a canary is scored on the steps
// it was actually sampled in; under amplified accounting (Poisson DP-SGD,
// band-poisson BandMF) the sampling must stay secret, so each step a canary
// could have joined is an independent chance with probability q, scored by
// its exact likelihood ratio, mixed over the b partitions it may belong to.
//
// The bound is valid for any score; scores only decide how tight it is.
package audit
