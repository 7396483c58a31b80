// Package dpcore is the shared vocabulary of the privacy stack: the
// workload an optimizer applies to the gradient stream (Workload, with its
// learning-rate Schedule), the participation schema that bounds how often
// one example joins a step (Schema), the ErrInvalid sentinel matched by
// every bad-argument error of the module under this one name (made with
// Invalid as an *InvalidError that names its package and reason, so
// callers add context with Within instead of cutting text apart), and
// Epsilon, an epsilon as written in JSON ("+Inf" when there is
// no finite guarantee).
//
// These are plain data, defined once here so that package sampler (which
// reports the schema it realizes), package optim (which reports the
// workload it applies) and package mfnoise (which factorizes the workload
// and computes sensitivity under the schema) agree on them without
// importing one another. dpcore imports nothing else from this module.
// The mathematics is in docs/math.md, sections 2 and 3 (cited in comments
// as "SPEC 2" and "SPEC 3").
package dpcore
