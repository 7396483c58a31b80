package mfnoise

import (
	"context"
	"math"
	"strings"
	"testing"
)

// A caller's factorization scores exactly as the same mechanism does in
// Compare.
func TestScoreMatchesCompare(t *testing.T) {
	w, _ := PrefixSum(16)
	schema, _ := KBParticipation(2, 8)
	rows, err := Compare(context.Background(), w, schema, []Mechanism{MechanismSpec{Kind: KindTreeFull, Stamps: 1}}, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := BinaryTree(w, TreeOptions{Decoder: TreeFull})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Score("mine", f, schema)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.Loss-rows[0].Loss) > 1e-9*rows[0].Loss || got.Sensitivity != rows[0].Sensitivity || got.Mechanism != "mine" {
		t.Fatalf("score %+v, compare %+v", got, rows[0])
	}
	if _, err := Score("none", nil, schema); err == nil {
		t.Fatal("nil factorization scored")
	}
}

// parseList parses comma-separated mechanism names with ParseMechanism
// (command lines parse lists with privacy.ParseMechanisms).
func parseList(list string) ([]Mechanism, error) {
	var ms []Mechanism
	for _, name := range strings.Split(list, ",") {
		s, err := ParseMechanism(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, s)
	}
	return ms, nil
}
