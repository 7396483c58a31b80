package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fast are the flags of a run that takes well under a second.
var fast = []string{"-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "dpsgd",
	"-accountant", "rdp", "-batch", "60", "-steps", "4", "-cache", ""}

func args(extra ...string) []string { return append(append([]string{"run"}, fast...), extra...) }

// repeated finds a prefix said twice ("train: train: ", "sampler: sampler: ").
var repeated = regexp.MustCompile(`(?:^|[ :])([a-z][a-z0-9-]*): ([a-z][a-z0-9-]*): `)

func checkOneLine(t *testing.T, what string, code int, stderr string) {
	t.Helper()
	if code == 0 {
		t.Errorf("%s: exit 0", what)
		return
	}
	if strings.Count(strings.TrimRight(stderr, "\n"), "\n") != 0 || !strings.HasPrefix(stderr, "train: ") {
		t.Errorf("%s: stderr is not one line: %q", what, stderr)
	}
	for _, m := range repeated.FindAllStringSubmatch(stderr, -1) {
		if m[1] == m[2] {
			t.Errorf("%s: prefix %q said twice: %q", what, m[1], stderr)
		}
	}
}

// copyEmbedded writes the embedded Fashion-MNIST subset as an IDX directory.
func idxDir(t *testing.T) string {
	dir := t.TempDir()
	for _, f := range []string{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "data", "embedded", f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	return dir
}

// cifar10Dir writes a one-record-per-file CIFAR-10 directory.
func cifar10Dir(t *testing.T) string {
	dir := t.TempDir()
	rec := make([]byte, 1+3*32*32)
	for _, f := range []string{"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"} {
		os.WriteFile(filepath.Join(dir, f), rec, 0o644)
	}
	return dir
}

// Item 1: an explicit -dir that cannot be read is an error (no silent
// fallback to the embedded subset); a directory of another format is
// refused under the wrong name.
func TestDataDirMissingCorruptOrOfAnotherFormat(t *testing.T) {
	empty := t.TempDir()
	corrupt := t.TempDir()
	os.WriteFile(filepath.Join(corrupt, "train-images-idx3-ubyte"), []byte("not idx"), 0o644)
	os.WriteFile(filepath.Join(corrupt, "train-labels-idx1-ubyte"), []byte("not idx"), 0o644)
	idx, c10 := idxDir(t), cifar10Dir(t)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-dir", filepath.Join(empty, "missing"), "-steps", "2"}, "no such file"},
		{[]string{"-dir", empty, "-steps", "2"}, "holds no"},
		{[]string{"-dir", corrupt, "-steps", "2"}, "malformed"},
		{[]string{"run", "-data", "fashion-mnist", "-dir", empty}, "holds no"},
		{[]string{"run", "-data", "cifar10", "-dir", idx}, "holds IDX (MNIST-style) files, not CIFAR-10"},
		{[]string{"run", "-data", "cifar100", "-dir", c10}, "holds CIFAR-10 files, not CIFAR-100"},
		{[]string{"run", "-data", "mnist", "-dir", c10}, "holds CIFAR-10 files, not MNIST"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCLI(t, c.args...)
		checkOneLine(t, fmt.Sprint(c.args), code, stderr)
		if !strings.Contains(stderr, c.want) || strings.Contains(stdout, "test accuracy") {
			t.Errorf("%v: stderr %q lacks %q (stdout %q)", c.args, stderr, c.want, stdout)
		}
	}
	// The directory of the right format loads.
	code, stdout, stderr := runCLI(t, "run", "-data", "fashion-mnist", "-dir", idx, "-train-examples", "600", "-model", "logistic",
		"-mechanism", "dpsgd", "-accountant", "rdp", "-batch", "60", "-steps", "2", "-cache", "")
	if code != 0 || !strings.Contains(stdout, "Fashion-MNIST "+idx) {
		t.Fatalf("fashion-mnist from %s: exit %d %s %s", idx, code, stderr, stdout)
	}
}

// Item 3: unwritable outputs fail before any training, not at the end.
func TestUnwritableOutputsRefusedBeforeTraining(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "dir")
	for _, flagName := range []string{"-json", "-checkpoint", "-metrics"} {
		start := time.Now()
		code, stdout, stderr := runCLI(t, args(flagName, filepath.Join(missing, "out"))...)
		checkOneLine(t, flagName, code, stderr)
		if code != 2 || !strings.Contains(stderr, flagName+" ") || strings.Contains(stdout, "data:") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q: want the path refused before the data is loaded", flagName, code, stderr, stdout)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: refused after %v", flagName, d)
		}
	}
}

// Item 5: with -json -, standard output is exactly one JSON document.
func TestJSONToStdoutIsOnlyJSON(t *testing.T) {
	code, stdout, stderr := runCLI(t, args("-json", "-", "-seed", "x", "-insecure-seed")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res map[string]any
	dec := json.NewDecoder(strings.NewReader(stdout))
	if err := dec.Decode(&res); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON document (%v):\n%s", err, stdout)
	}
	if res["steps"].(float64) != 4 || !strings.Contains(stderr, "test accuracy") {
		t.Fatalf("result %v; log on stderr:\n%s", res, stderr)
	}
}

// Item 7: config values are decoded into the flags' types.
func TestConfigFileIsTyped(t *testing.T) {
	parse := func(cfg string, cli ...string) (runFlags, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var r runFlags
		r.register(fs)
		if err := fs.Parse(cli); err != nil {
			t.Fatal(err)
		}
		return r, applyConfig(fs, []byte(cfg))
	}
	r, err := parse(`{"steps": 1000000, "seed": 12345678, "epsilon": 0.1, "hidden": [256, 128], "non-private": true, "momentum": 0.5}`)
	if err != nil {
		t.Fatal(err)
	}
	if r.steps != 1000000 || r.seed != "12345678" || r.eps != 0.1 || r.hidden != "256,128" || !r.nonPrivate || r.momentum != (optionalFloat{0.5, true}) {
		t.Fatalf("decoded %+v", r)
	}
	if r, _ := parse(`{"steps": 7}`, "-steps", "9"); r.steps != 9 {
		t.Fatalf("the command line must override the file: steps %d", r.steps)
	}
	for _, bad := range []string{`{"steps": 1.5}`, `{"steps": "ten"}`, `{"seed": true}`, `{"nope": 1}`, `{"config": "x"}`, `[1]`, `{"steps": 1} {}`, `null`, `{"non-private": 1}`} {
		if _, err := parse(bad); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
	// End to end: {"seed": 12345678} is the run of -seed 12345678.
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "c.json")
	os.WriteFile(cfgPath, []byte(`{"seed": 12345678, "train-examples": 600}`), 0o644)
	var out [2]string
	for i, extra := range [][]string{{"-config", cfgPath, "-insecure-seed"}, {"-seed", "12345678", "-insecure-seed"}} {
		code, stdout, stderr := runCLI(t, args(append(extra, "-json", "-")...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", extra, code, stderr)
		}
		var res struct {
			Final json.RawMessage `json:"final"`
		}
		json.Unmarshal([]byte(stdout), &res)
		out[i] = string(res.Final)
	}
	if out[0] == "" || out[0] != out[1] {
		t.Fatalf("config seed gave %s, flag seed %s", out[0], out[1])
	}
}

// Items 8 and 10: silently accepted values are errors, each one line with
// one prefix.
func TestMoreInvalidInput(t *testing.T) {
	cases := [][]string{
		{"compare", "-n", "16", "-epsilon", "NaN"},
		{"compare", "-n", "16", "-epsilon", "-1"},
		{"compare", "-n", "16", "-epsilon", "+Inf"},
		{"compare", "-n", "16", "-epsilon", "1", "-delta", "0"},
		args("-eval-every", "-1"),
		args("-checkpoint-every", "-1"),
		args("-train-examples", "-5"),
		args("-momentum", "NaN"),
		args("-epsilon", "-3"),
		args("-mechanism", "bandmf:0"),
		{"run", "-frobnicate"},
		{"-frobnicate"},
		{"compare", "-n"},
	}
	for _, a := range cases {
		code, stdout, stderr := runCLI(t, a...)
		checkOneLine(t, fmt.Sprint(a), code, stderr)
		if strings.Contains(stdout, "test accuracy") {
			t.Errorf("%v trained", a)
		}
	}
	_, _, stderr := runCLI(t, "run", "-frobnicate")
	if !strings.Contains(stderr, "-frobnicate") || !strings.Contains(stderr, "train run -h") || strings.Contains(stderr, "Usage") {
		t.Errorf("unknown flag: %q, want one line with a hint", stderr)
	}
}

func TestDedupPrefixes(t *testing.T) {
	for in, want := range map[string]string{
		"train: sampler: sampler: k too large": "train: sampler: k too large",
		"a: b: a: b":                           "a: b: a: b",
		"data: x: x":                           "data: x: x",
		"x: x: x: y":                           "x: y",
	} {
		if got := dedupPrefixes(in); got != want {
			t.Errorf("dedupPrefixes(%q) = %q, want %q", in, got, want)
		}
	}
}

// Item 10: help names the program once and lists the commands; -momentum
// shows one default.
func TestHelp(t *testing.T) {
	code, _, stderr := runCLI(t, "-h")
	if code != 0 || !strings.HasPrefix(stderr, "Usage of train:") || strings.Contains(stderr, "train train") {
		t.Fatalf("train -h: exit %d\n%s", code, stderr)
	}
	for _, c := range []string{"train run", "train compare", "train account", "-steps"} {
		if !strings.Contains(stderr, c) {
			t.Errorf("train -h lacks %q", c)
		}
	}
	_, _, stderr = runCLI(t, "run", "-h")
	i := strings.Index(stderr, "-momentum")
	if i < 0 {
		t.Fatal("run -h lacks -momentum")
	}
	block := stderr[i:]
	if j := strings.Index(block[1:], "\n  -"); j > 0 {
		block = block[:j+1]
	}
	if n := strings.Count(block, "default"); n != 1 {
		t.Fatalf("-momentum shows %d defaults:\n%s", n, block)
	}
}

// Item 8: with k*b != n the footer gives the schema as realized.
func TestCompareFooterGivesRealizedSchema(t *testing.T) {
	code, stdout, stderr := runCLI(t, "compare", "-n", "16", "-participation", "kb", "-k", "5", "-b", "8", "-mechanisms", "dpsgd", "-cache", "")
	if code != 0 {
		t.Fatal(stderr)
	}
	if !strings.Contains(stdout, "kb(k=2,b=8)") || strings.Contains(stdout, "kb(k=5,b=8),") {
		t.Fatalf("footer should give the realized k=2:\n%s", stdout)
	}
}

// Item 4: SIGTERM saves a checkpoint at the interrupt, exits 130 and says
// how to resume; the same command resumes and says from which step. The
// test binary re-executes itself as the real program (main, with its
// signal handling).
const cliChildEnv = "DPMF_CLI_CHILD_ARGS"

func TestMain(m *testing.M) {
	// The worker processes of train run -workers are os.Executable: this
	// binary, run as the program (workers_test.go).
	if os.Getenv(cliAsMainEnv) != "" {
		main()
		return
	}
	if a := os.Getenv(cliChildEnv); a != "" {
		var childArgs []string
		json.Unmarshal([]byte(a), &childArgs)
		os.Args = append([]string{"train"}, childArgs...)
		main()
		return
	}
	os.Exit(m.Run())
}

func TestSignalSavesCheckpointAndResumes(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "run.ckpt")
	a := []string{"run", "-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "dpsgd",
		"-accountant", "rdp", "-batch", "60", "-steps", "400", "-checkpoint", ckpt, "-checkpoint-every", "1000000",
		"-seed", "s", "-insecure-seed", "-cache", "", "-metrics", filepath.Join(dir, "m.jsonl")}
	start := func() (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		enc, _ := json.Marshal(a)
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), cliChildEnv+"="+string(enc))
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		return c, &o, &e
	}
	c, _, stderr := start()
	// Wait until training is under way: the metrics file has a step.
	deadline := time.Now().Add(time.Minute)
	for {
		b, _ := os.ReadFile(filepath.Join(dir, "m.jsonl"))
		if bytes.Contains(b, []byte(`"step"`)) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Process.Signal(syscall.SIGTERM)
	err := c.Wait()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != exitInterrupted {
		t.Fatalf("SIGTERM: %v, want exit %d; stderr %s", err, exitInterrupted, stderr)
	}
	msg := stderr.String()
	m := regexp.MustCompile(`interrupted at step (\d+) of 400; checkpoint saved to (\S+): run the same command again to resume from step (\d+)`).FindStringSubmatch(msg)
	if m == nil || m[2] != ckpt || m[1] != m[3] {
		t.Fatalf("interrupt message: %q", msg)
	}
	if _, err := os.Stat(ckpt); err != nil {
		t.Fatal("no checkpoint written at the interrupt")
	}
	c, stdout, stderr := start()
	if err := c.Wait(); err != nil {
		t.Fatalf("resume: %v %s", err, stderr)
	}
	if !strings.Contains(stdout.String(), "resumed from checkpoint "+ckpt+" at step "+m[1]+" of 400") {
		t.Fatalf("resume does not say from which step:\n%s", stdout)
	}
}
