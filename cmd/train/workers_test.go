package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/syncbuf"
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

// waitFor polls b until re matches, and returns the submatches.
func waitFor(t *testing.T, b *syncbuf.Buffer, re *regexp.Regexp, done <-chan int) []string {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m
		}
		select {
		case code := <-done:
			t.Fatalf("the run ended (exit %d) before %q showed", code, re)
		case <-deadline:
			t.Fatalf("no %q within 2 minutes", re)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Issue 39 item 4: a worker process that train run -workers started and
// that is killed (SIGKILL) during the run is restarted, with a line saying
// so; the coordinator says which worker the step waits for, and how long
// it will; the run completes. (Before, it waited silently for
// -worker-wait and stopped.)
func TestRunWorkersRestartsKilledWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux: the test kills a worker process with SIGKILL and reads its pid from the output")
	}
	t.Setenv(cliAsMainEnv, "1")
	args := []string{"run", "-data", "embedded", "-train-examples", "600", "-model", "logistic", "-mechanism", "dpsgd",
		"-accountant", "rdp", "-batch", "60", "-steps", "1000", "-seed", "s", "-insecure-seed", "-cache", "",
		"-workers", "2", "-worker-wait", "20s"}
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() { done <- run(context.Background(), args, &stdout, &stderr) }()
	m := waitFor(t, &stdout, regexp.MustCompile(`workers: 2 local processes \(pids (\d+), (\d+)\)`), done)
	waitFor(t, &stderr, regexp.MustCompile(`step 1 of 1000`), done)
	pid, _ := strconv.Atoi(m[2])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing worker 1/2 (pid %d): %v", pid, err)
	}
	var code int
	select {
	case code = <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("the run did not end within 3 minutes of the kill")
	}
	errs := stderr.String()
	if code != 0 {
		t.Fatalf("exit %d after a worker was killed:\n%s", code, errs)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`workers: worker 1/2 \(pid ` + m[2] + `\) signal: killed; restarted as pid \d+ \(restart 1 of at most 3\)`),
		regexp.MustCompile(`workers: step \d+ has waited \d+s for worker 1/2: .+; the run stops with a checkpoint if it does not answer within \d+s more \(-worker-wait\)`),
		regexp.MustCompile(`workers: worker 1/2 answered step \d+ after `),
	} {
		if !want.MatchString(errs) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	t.Logf("stderr:\n%s", errs)
	if !strings.Contains(stdout.String(), "test accuracy") {
		t.Errorf("no final line:\n%s", stdout.String())
	}
}
