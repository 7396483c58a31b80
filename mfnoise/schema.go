package mfnoise

import "github.com/dpmf-go/dpmf/dpcore"

// The participation schema is defined in package dpcore, shared with
// package sampler; these aliases keep the mfnoise names.

// SchemaKind names a participation schema (SPEC 3); see dpcore.SchemaKind.
type SchemaKind = dpcore.SchemaKind

// Schema is a participation schema; see dpcore.Schema.
type Schema = dpcore.Schema

const (
	// Single: every example joins at most one step.
	Single = dpcore.Single
	// KB: (k,b)-participation, fixed-order epochs.
	KB = dpcore.KB
	// MinSep: (k,b)-min-separation participation.
	MinSep = dpcore.MinSep
)

// SingleParticipation is dpcore.SingleParticipation.
func SingleParticipation() Schema { return dpcore.SingleParticipation() }

// KBParticipation is dpcore.KBParticipation.
func KBParticipation(k, b int) (Schema, error) { return dpcore.KBParticipation(k, b) }

// MinSepParticipation is dpcore.MinSepParticipation.
func MinSepParticipation(k, b int) (Schema, error) { return dpcore.MinSepParticipation(k, b) }
