package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// applyConfig sets every flag named in the JSON object b, unless it was
// given on the command line. Each value is decoded into its flag's own type
// (an integer flag takes a JSON integer, a float flag a number, a bool flag
// a boolean, a string flag a string), so {"steps": 1000000} is the integer
// one million and {"seed": 12345678} is the seed "12345678", exactly as on
// the command line. A string flag also takes a JSON number, spelled as
// written in the file, and -hidden an array of integers.
func applyConfig(fs *flag.FlagSet, b []byte) error {
	var kv map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&kv); err != nil {
		return fmt.Errorf("not a JSON object: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("text after the JSON object")
	}
	if kv == nil {
		return fmt.Errorf("not a JSON object")
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first error is the same on every run
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config" {
			return fmt.Errorf("unknown key %q", k)
		}
		v, err := configValue(f, kv[k])
		if err != nil {
			return fmt.Errorf("%q: %v", k, err)
		}
		if set[k] {
			continue
		}
		if err := fs.Set(k, v); err != nil {
			return fmt.Errorf("%q: %v", k, err)
		}
	}
	return nil
}

// configValue decodes raw into the type of f's value and returns its
// command-line spelling.
func configValue(f *flag.Flag, raw json.RawMessage) (string, error) {
	var typed any
	if g, ok := f.Value.(flag.Getter); ok {
		typed = g.Get()
	}
	switch typed.(type) {
	case bool:
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", fmt.Errorf("want true or false, got %s", raw)
		}
		return strconv.FormatBool(v), nil
	case int:
		var v int
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", fmt.Errorf("want an integer, got %s", raw)
		}
		return strconv.Itoa(v), nil
	case float64, optionalFloat:
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return "", fmt.Errorf("want a number, got %s", raw)
		}
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	}
	// A string.
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var num json.Number
	if err := json.Unmarshal(raw, &num); err == nil {
		return num.String(), nil
	}
	if f.Name == "hidden" {
		var h []int
		if err := json.Unmarshal(raw, &h); err == nil {
			parts := make([]string, len(h))
			for i, v := range h {
				parts[i] = strconv.Itoa(v)
			}
			return strings.Join(parts, ","), nil
		}
		return "", fmt.Errorf("want a string such as \"256,128\" or an array of integers, got %s", raw)
	}
	return "", fmt.Errorf("want a string, got %s", raw)
}

// optionalFloat is a float flag whose default depends on other flags: unset,
// it prints no default of its own in the usage.
type optionalFloat struct {
	v   float64
	set bool
}

func (o *optionalFloat) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.FormatFloat(o.v, 'g', -1, 64)
}

func (o *optionalFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("want a number")
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("want a finite number")
	}
	o.v, o.set = v, true
	return nil
}

func (o *optionalFloat) Get() any { return *o }

// zeroMeansDefault lists the flags of "train run" and "train audit" whose
// zero the library reads as "unset": given explicitly, 0 would silently
// become the default, so it is refused with what to write instead.
var zeroMeansDefault = map[string]string{
	"clip":          "want a positive clip norm (omit -clip for the default 1)",
	"lr":            "want a positive learning rate (omit -lr for the default: 0.5 for SGD, 0.1 with momentum)",
	"sigma":         "want a positive noise multiplier (omit -sigma to calibrate it to -epsilon)",
	"delta":         "want a delta in (0,1) (omit -delta for the default min(1e-5, 1/examples))",
	"eval-every":    "want a positive number of steps (omit -eval-every for the default steps/5)",
	"bands":         "want a positive number of partitions (omit -bands for the mechanism's bands)",
	"embedding-dim": "want a positive dimension (omit -embedding-dim for the default 8)",
}

// refuseExplicitZero refuses a flag of fs set explicitly (on the command
// line or by -config) to a zero that means "default" (want says what to
// write instead).
func refuseExplicitZero(fs *flag.FlagSet, want map[string]string) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		msg, ok := want[f.Name]
		if !ok || err != nil {
			return
		}
		if v, perr := strconv.ParseFloat(f.Value.String(), 64); perr == nil && v == 0 {
			err = usagef("-%s %s: %s", f.Name, f.Value.String(), msg)
		}
	})
	return err
}
