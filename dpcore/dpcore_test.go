package dpcore

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestCooldownScheduleEndsAtFinal(t *testing.T) {
	r, err := CooldownSchedule(8, 0.5, 0.05).Rates(8)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{1, 1, 1, 1, 1, 1 - 0.95/3, 1 - 2*0.95/3, 0.05}
	for i := range want {
		if math.Abs(r[i]-want[i]) > 1e-15 {
			t.Fatalf("rate %d = %v, want %v (all %v)", i+1, r[i], want[i], r)
		}
	}
}

func TestMomentumWorkloadMatchesHeavyBall(t *testing.T) {
	const n, beta = 9, 0.9
	w, err := MomentumWorkload(n, beta, CooldownSchedule(n, 0.34, 0.05))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := w.Matrix()
	eta, _ := w.Schedule.Rates(n)
	// Run heavy ball on unit impulses: column j of A is the response to g = e_j.
	for j := 0; j < n; j++ {
		var m, theta float64
		for i := 0; i < n; i++ {
			g := 0.0
			if i == j {
				g = 1
			}
			m = beta*m + g
			theta += eta[i] * m
			if math.Abs(a.At(i, j)-theta) > 1e-12 {
				t.Fatalf("A[%d,%d] = %v, heavy ball gives %v", i, j, a.At(i, j), theta)
			}
		}
	}
}

func TestSchemaPatternsAndValidate(t *testing.T) {
	s, err := KBParticipation(3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Patterns(5), [][]int{{0, 2, 4}, {1, 3}}; !reflect.DeepEqual(got, want) {
		t.Errorf("kb(3,2) patterns over 5 steps = %v, want %v", got, want)
	}
	if got := SingleParticipation().Patterns(3); !reflect.DeepEqual(got, [][]int{{0}, {1}, {2}}) {
		t.Errorf("single patterns = %v", got)
	}
	if s.String() != "kb(k=3,b=2)" || SingleParticipation().String() != "single" {
		t.Errorf("names %q, %q", s, SingleParticipation())
	}
	// k*b = 6 < 7 steps: no pattern for step 7.
	if err := s.Validate(7); !errors.Is(err, ErrInvalid) {
		t.Errorf("kb(3,2) over 7 steps: err = %v, want ErrInvalid", err)
	}
	if err := s.Validate(6); err != nil {
		t.Errorf("kb(3,2) over 6 steps: %v", err)
	}
	ms, err := MinSepParticipation(2, 4)
	if err != nil || ms.Validate(100) != nil || ms.Patterns(10) != nil {
		t.Errorf("minsep(2,4): %v, %v", ms, err)
	}
	for _, bad := range []func() error{
		func() error { _, err := KBParticipation(0, 2); return err },
		func() error { _, err := MinSepParticipation(2, -1); return err },
		func() error { return Schema{Kind: "banded"}.Validate(10) },
		func() error { return SingleParticipation().Validate(0) },
		func() error { _, err := PrefixSum(0); return err },
		func() error { _, err := MomentumWorkload(10, 1, Schedule{}); return err },
		func() error { _, err := Schedule{Explicit: []float64{1, math.NaN()}}.Rates(2); return err },
		func() error { return Workload{Kind: "adam", N: 3}.Validate() },
	} {
		if err := bad(); !errors.Is(err, ErrInvalid) {
			t.Errorf("err = %v, want ErrInvalid", err)
		}
	}
}

// Epsilon +Inf (no finite guarantee) is written as the string "+Inf" and
// read back; finite values stay JSON numbers; NaN and -Inf are refused.
func TestEpsilonJSON(t *testing.T) {
	for _, c := range []struct {
		e    Epsilon
		want string
	}{{Epsilon(math.Inf(1)), `"+Inf"`}, {8, `8`}, {0.125, `0.125`}, {2e16, `20000000000000000`}, {0, `0`}} {
		b, err := json.Marshal(struct {
			E Epsilon `json:"epsilon"`
		}{c.e})
		if err != nil || string(b) != `{"epsilon":`+c.want+`}` {
			t.Errorf("%v: %s %v, want %s", float64(c.e), b, err, c.want)
			continue
		}
		var back struct {
			E Epsilon `json:"epsilon"`
		}
		if err := json.Unmarshal(b, &back); err != nil || back.E != c.e {
			t.Errorf("%s read back as %v (%v)", b, back.E, err)
		}
	}
	for _, bad := range []float64{math.NaN(), math.Inf(-1), -1} {
		if b, err := json.Marshal(Epsilon(bad)); err == nil {
			t.Errorf("%v written as %s", bad, b)
		}
	}
	for _, bad := range []string{`"Inf"`, `null`, `-1`, `"8"`} {
		var e Epsilon
		if err := json.Unmarshal([]byte(bad), &e); err == nil && bad != "null" {
			t.Errorf("%s read as %v", bad, e)
		}
	}
	if s := Epsilon(math.Inf(1)).String(); s != "+Inf (no finite guarantee)" {
		t.Errorf("String: %q", s)
	}
}

// Invalidf's message is exactly the formatted text (no "invalid argument"
// layered into it), it matches ErrInvalid, and %w still wraps.
func TestInvalidfMessageAndMatch(t *testing.T) {
	inner := errors.New("inner")
	err := Invalidf("privacy: bandmf:%d has %d bands: %w", 5000, 5000, inner)
	if got, want := err.Error(), "privacy: bandmf:5000 has 5000 bands: inner"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, inner) {
		t.Errorf("errors.Is: ErrInvalid %v, inner %v", errors.Is(err, ErrInvalid), errors.Is(err, inner))
	}
	if errors.Is(errors.New("x"), ErrInvalid) {
		t.Error("an unrelated error matches ErrInvalid")
	}
	if _, err := MomentumWorkload(0, 0.9, Schedule{}); !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "invalid argument") {
		t.Errorf("MomentumWorkload(0): %v", err)
	}
}
