package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/privacy"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCompareJSONContract(t *testing.T) {
	code, out, stderr := runCLI(t, "compare", "-n", "16", "-participation", "kb", "-k", "2", "-b", "8",
		"-mechanisms", "dpsgd,tree-online,tree-full/s2,fft,mf-single,bandmf:4", "-format", "json", "-cache", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("not one JSON array: %v\n%s", err, out)
	}
	if len(rows) != 6 {
		t.Fatalf("%d rows, want 6", len(rows))
	}
	seen := map[string]bool{}
	prev := 0.0
	for _, r := range rows {
		for _, k := range []string{"mechanism", "sensitivity", "sensitivity_exact", "loss", "rmse"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("row %v lacks %q", r, k)
			}
		}
		seen[r["mechanism"].(string)] = true
		loss := r["loss"].(float64)
		if loss < prev {
			t.Fatalf("rows not sorted by loss: %v", rows)
		}
		prev = loss
		if rmse := r["rmse"].(float64); math.Abs(rmse-math.Sqrt(loss/16)) > 1e-9*rmse {
			t.Fatalf("rmse %v != sqrt(loss/n) for %v", rmse, r)
		}
	}
	if !seen["tree-full/s2"] || !seen["bandmf:4"] {
		t.Fatalf("mechanism names not echoed as given: %v", seen)
	}
}

func TestComparePlotsPNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rmse.png")
	code, _, stderr := runCLI(t, "compare", "-n", "32", "-mechanisms", "dpsgd,tree-online,fft", "-plot", path, "-cache", "")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("no PNG written: %v", err)
	}
}

func TestAccountJSONContract(t *testing.T) {
	code, out, stderr := runCLI(t, "account", "-mechanism", "gaussian", "-epsilon", "8", "-delta", "1e-6", "-accountant", "pld", "-format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"epsilon", "delta", "sigma", "accountant"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("%s lacks %q", out, k)
		}
	}
	// banded-MF Table 4: sigma 0.65294 gives epsilon 8 at delta 1e-6.
	if s := res["sigma"].(float64); math.Abs(s-0.65294)/0.65294 > 1e-4 {
		t.Fatalf("sigma %v, want 0.65294", s)
	}
	want, _ := privacy.GaussianSigma(8, 1e-6)
	if s := res["sigma"].(float64); math.Abs(s-want) > 1e-4*want {
		t.Fatalf("sigma %v, exact Gaussian gives %v", s, want)
	}
	// bandmf: q = B/floor(M/bands), ceil(T/bands) compositions (SPEC 7).
	code, out, _ = runCLI(t, "account", "-mechanism", "bandmf", "-sigma", "1", "-delta", "1e-5", "-examples", "50000", "-batch", "500", "-steps", "2000", "-bands", "10", "-accountant", "rdp", "-format", "json")
	if code != 0 {
		t.Fatal(out)
	}
	json.Unmarshal([]byte(out), &res)
	if res["q"].(float64) != 0.1 || res["compositions"].(float64) != 200 {
		t.Fatalf("bandmf accounting %v: want q = 0.1 and 200 compositions", res)
	}
}

func TestInvalidInputExitsNonZeroWithOneLine(t *testing.T) {
	cases := [][]string{
		{"account", "-mechanism", "gaussian", "-epsilon", "-1", "-delta", "1e-5"},
		{"account", "-mechanism", "gaussian", "-epsilon", "1", "-delta", "2"},
		{"account", "-mechanism", "dpsgd", "-epsilon", "1", "-delta", "1e-5"},
		{"account", "-mechanism", "laplace", "-sigma", "1"},
		{"compare", "-n", "0"},
		{"compare", "-n", "10", "-participation", "kb", "-k", "2", "-b", "2"},
		{"compare", "-n", "10", "-mechanisms", "nope"},
		{"compare", "-n", "10", "-format", "xml"},
		{"run", "-epsilon", "-3", "-data", "embedded", "-steps", "2"},
		{"run", "-data", "embedded", "-batch", "100000", "-steps", "2"},
		{"frobnicate"},
	}
	for _, args := range cases {
		code, _, stderr := runCLI(t, args...)
		if code == 0 {
			t.Errorf("%v: exit 0", args)
			continue
		}
		if lines := strings.Count(strings.TrimRight(stderr, "\n"), "\n"); lines != 0 || !strings.HasPrefix(stderr, "train: ") {
			t.Errorf("%v: stderr is not one line: %q", args, stderr)
		}
	}
}

func TestRunEmbeddedSmall(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "result.json")
	code, stdout, stderr := runCLI(t, "run", "-data", "embedded", "-steps", "30", "-batch", "100", "-mechanism", "dpsgd",
		"-epsilon", "8", "-seed", "cli test", "-insecure-seed", "-json", out, "-metrics", filepath.Join(dir, "m.jsonl"), "-cache", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, stdout)
	}
	var res struct {
		Plan struct {
			Epsilon float64 `json:"epsilon"`
			Ledger  struct {
				Accountant  string   `json:"accountant"`
				Assumptions []string `json:"assumptions"`
			} `json:"ledger"`
		} `json:"plan"`
		Final struct {
			Accuracy float64 `json:"test_accuracy"`
		} `json:"final"`
	}
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Plan.Epsilon <= 0 || res.Plan.Epsilon > 8 || res.Plan.Ledger.Accountant == "" || len(res.Plan.Ledger.Assumptions) == 0 {
		t.Fatalf("result lacks the privacy record: %s", b)
	}
	if res.Final.Accuracy < 0.3 {
		t.Fatalf("accuracy %v after 30 steps (chance 0.1)", res.Final.Accuracy)
	}
	m, _ := os.ReadFile(filepath.Join(dir, "m.jsonl"))
	if n := strings.Count(string(m), `{"kind":"step"`); n != 30 {
		t.Fatalf("%d step lines in the metrics file, want 30", n)
	}
}
