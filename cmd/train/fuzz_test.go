package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzConfigFile feeds arbitrary bytes to the -config reader: it must
// return an error or set flags, never panic, and what it sets must read
// back the same from the flag set.
func FuzzConfigFile(f *testing.F) {
	seeds := map[string]string{
		"typed":    `{"steps": 1000000, "seed": 12345678, "epsilon": 0.5, "hidden": [256, 128], "non-private": false, "momentum": 0.9}`,
		"strings":  `{"data": "embedded", "mechanism": "bandmf:auto", "hidden": "64,32", "seed": "abc"}`,
		"bad-type": `{"steps": 1.5}`,
		"unknown":  `{"frobnicate": 1}`,
		"not-obj":  `[1, 2, 3]`,
	}
	for name, s := range seeds {
		f.Add([]byte(s))
		if os.Getenv("DPMF_WRITE_FUZZ_CORPUS") != "" {
			dir := filepath.Join("testdata", "fuzz", "FuzzConfigFile")
			os.MkdirAll(dir, 0o755)
			os.WriteFile(filepath.Join(dir, name), fmt.Appendf(nil, "go test fuzz v1\n[]byte(%q)\n", s), 0o644)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
		var r runFlags
		r.register(fs)
		if err := applyConfig(fs, b); err != nil {
			return
		}
		// Every flag set from the file parses back to the same value.
		fs.Visit(func(fl *flag.Flag) {
			again := flag.NewFlagSet("again", flag.ContinueOnError)
			var r2 runFlags
			r2.register(again)
			if err := again.Set(fl.Name, fl.Value.String()); err != nil {
				t.Fatalf("%s = %q does not parse back: %v", fl.Name, fl.Value.String(), err)
			}
		})
	})
}
