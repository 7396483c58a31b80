package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// TestMechanismFlagTakesEveryName: -mechanism reads the planner's one
// parser, so the proof mechanism bsr:BANDS (one file of mfnoise, one line
// of privacy's table) serves with the sensitivity of its encoder under the
// service's participation schema (in exact arithmetic the ledger states the
// quantized encoder's, which is at most 1e-6 above).
func TestMechanismFlagTakesEveryName(t *testing.T) {
	for _, name := range []string{"bsr:4", "tree-online"} {
		o, err := parseFlags([]string{"-store", filepath.Join(t.TempDir(), "m.db"), "-dim", "3", "-epsilon", "1", "-delta", "1e-6",
			"-horizon", "16", "-k", "2", "-b", "8", "-clip", "1", "-mechanism", name}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		agg, err := openAggregator(context.Background(), o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l := agg.Ledger()
		agg.Close()
		m, _ := privacy.ParseMechanism(name)
		w, _ := dpcore.PrefixSum(16)
		schema, _ := dpcore.MinSepParticipation(2, 8)
		f, err := mfnoise.BuildDense(context.Background(), m, w, schema, mfnoise.BuildOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want, _ := f.Sensitivity(schema)
		if l.Mechanism != name || l.Sensitivity < want.Value || l.Sensitivity > want.Value*(1+1e-6) {
			t.Fatalf("%s: ledger names %s with sensitivity %v, want %v", name, l.Mechanism, l.Sensitivity, want.Value)
		}
	}
}
