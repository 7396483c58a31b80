// Package privacy is the privacy plan of a run: which sampler realizes which
// participation schema, which mechanism adds noise with which sensitivity,
// whether amplification by sampling may be claimed, the accounting event
// that amounts to, the calibrated noise multiplier, and the ledger entry
// that records the guarantee with every assumption it rests on.
package privacy
