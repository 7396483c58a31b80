package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cliAsMainEnv makes this test binary run as the program (TestMain): the
// worker processes train run -workers starts are os.Executable.
const cliAsMainEnv = "DPMF_CLI_AS_MAIN"

// train run -workers 3 starts a loopback NATS server and three worker
// processes, and ends with the plan and ledger of the same run in one
// process, byte for byte, and its accuracy.
func TestRunWorkersMatchesOneProcess(t *testing.T) {
	t.Setenv(cliAsMainEnv, "1")
	dir := t.TempDir()
	args := []string{"run", "-data", "embedded", "-train-examples", "1200", "-model", "mlp", "-hidden", "16",
		"-mechanism", "dpsgd", "-accountant", "rdp", "-batch", "60", "-steps", "30", "-seed", "s", "-insecure-seed", "-cache", ""}
	type result struct {
		Plan  json.RawMessage `json:"plan"`
		Final struct {
			Accuracy float64 `json:"test_accuracy"`
		} `json:"final"`
	}
	read := func(name string, extra ...string) result {
		path := filepath.Join(dir, name)
		code, _, stderr := runCLI(t, append(append(args, "-json", path), extra...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var r result
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	one, three := read("one.json"), read("three.json", "-workers", "3")
	if string(one.Plan) != string(three.Plan) {
		t.Fatalf("plans differ:\none process: %s\nthree workers: %s", one.Plan, three.Plan)
	}
	if math.Abs(one.Final.Accuracy-three.Final.Accuracy) > 0.002 {
		t.Fatalf("accuracy %v in one process, %v on three workers", one.Final.Accuracy, three.Final.Accuracy)
	}
}

func TestWorkerFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"worker", "-nats", "nats://127.0.0.1:1", "-nats-token-file", "x"}, "-shard i/W is required"},
		{[]string{"worker", "-shard", "3/3", "-nats", "nats://127.0.0.1:1", "-nats-token-file", "x"}, "want i/W"},
		{[]string{"worker", "-shard", "0/3", "-nats", "nats://127.0.0.1:1"}, "needs credentials"},
		{[]string{"worker", "-shard", "0/3"}, "-nats URL is required"},
		{[]string{"run", "-data", "embedded", "-steps", "2", "-nats", "nats://127.0.0.1:1"}, "-nats needs -workers"},
		{[]string{"run", "-data", "embedded", "-steps", "2", "-workers", "2", "-nats-creds", "c"}, "-nats-creds needs -nats"},
		{[]string{"run", "-data", "embedded", "-steps", "2", "-workers", "2", "-nats", "nats://127.0.0.1:1"}, "needs credentials"},
		{[]string{"run", "-data", "embedded", "-steps", "2", "-workers", "-1"}, "-workers -1"},
	} {
		code, _, stderr := runCLI(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, %q; want exit 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
}

// A worker reads the -config file of the coordinator, coordinator-only
// keys included: it gets past the flags to the connection.
func TestWorkerReadsCoordinatorConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(path, []byte(`{"data": "embedded", "model": "mlp", "workers": 3, "save-model": "m.dpmf", "plot": "p.png", "checkpoint": "run.ckpt"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, "worker", "-config", path, "-shard", "0/3", "-nats", "nats://127.0.0.1:1", "-nats-token-file", path)
	if code != 2 || !strings.Contains(stderr, "-nats nats://127.0.0.1:1") {
		t.Fatalf("exit %d, %q: want the flags accepted and the connection refused", code, stderr)
	}
}
