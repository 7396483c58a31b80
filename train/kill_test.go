package train

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
	"github.com/vmihailenco/msgpack/v5"
)

// The kill harness tests crash consistency like a database's: a child
// process (this test binary, re-executed) trains with checkpoints and a
// metrics file and is killed with SIGKILL at random points, many of them
// inside checkpoint and metrics writes (Config.slowWrite, set by the
// child, widens those windows); each kill is followed by a resume. After every kill the
// checkpoint must be intact and every complete metrics line must parse and
// continue the sequence of steps; at the end the parameters must be
// bit-identical to an uninterrupted run and the metrics file must hold
// every step and evaluation exactly once.
const killChildEnv = "DPMF_TRAIN_KILL_CHILD"

func killConfig(t testing.TB, dir string, steps int) Config {
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Optimizer.Momentum, cfg.Optimizer.LearningRate = mfnoise.BandMF{Bands: 4}, steps, 0.9, 0.1
	cfg.Privacy.Accountant, cfg.Output.EvalEvery = privacy.RDP, 10
	if dir != "" {
		cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery = filepath.Join(dir, "run.ckpt"), 3
		cfg.Output.MetricsPath = filepath.Join(dir, "metrics.jsonl")
	}
	return cfg
}

func TestKillHarnessChild(t *testing.T) {
	spec := os.Getenv(killChildEnv)
	if spec == "" {
		t.Skip("skipped because it runs only as the child process of TestKillAtRandomPointsAndResume")
	}
	dir, stepsText, _ := strings.Cut(spec, "|")
	steps, _ := strconv.Atoi(stepsText)
	cfg := killConfig(t, dir, steps)
	cfg.Output.slowWrite = 8 * time.Millisecond
	out := bufio.NewWriter(os.Stdout)
	cfg.Output.OnStep = func(sm StepMetrics) {
		fmt.Fprintf(out, "killharness step %d\n", sm.Step)
		out.Flush()
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	if err := atomicfile.WriteFile(filepath.Join(dir, "result.json"), b); err != nil {
		t.Fatal(err)
	}
}

// checkCheckpointIntact reads the checkpoint as a resume would and checks
// its checksum and step.
func checkCheckpointIntact(t *testing.T, path string, every, steps int) int {
	t.Helper()
	if _, err := os.Stat(path); os.IsNotExist(err) {
		return 0
	}
	payload, err := atomicfile.ReadSealed(path, checkpointMagic, checkpointVersion)
	if err != nil {
		t.Fatalf("checkpoint unreadable or failing its checksum after a kill: %v", err)
	}
	var ck checkpointState
	if err := msgpack.Unmarshal(payload, &ck); err != nil {
		t.Fatalf("checkpoint payload unreadable after a kill: %v", err)
	}
	if ck.Step <= 0 || ck.Step%every != 0 && ck.Step != steps {
		t.Fatalf("checkpoint at step %d", ck.Step)
	}
	return ck.Step
}

// checkMetricsPrefix checks a metrics file that a kill may have torn:
// every complete line parses and continues the sequence of steps, and the
// file reaches at least the checkpoint's step.
func checkMetricsPrefix(t *testing.T, path string, ckptStep int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) && ckptStep == 0 {
			return
		}
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i+1]
	} else {
		b = nil
	}
	last := 0
	for ln, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		if len(line) == 0 && len(b) == 0 {
			break
		}
		var rec metricsRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("after a kill, complete metrics line %d does not parse: %q", ln+1, line)
		}
		if rec.Kind == "step" {
			if rec.Step != last+1 {
				t.Fatalf("after a kill, metrics line %d is step %d after step %d", ln+1, rec.Step, last)
			}
			last = rec.Step
		}
	}
	if last < ckptStep {
		t.Fatalf("metrics file reaches step %d, behind the checkpoint at %d", last, ckptStep)
	}
}

func TestKillAtRandomPointsAndResume(t *testing.T) {
	kills := 24
	if !testing.Short() {
		kills = 60
	}
	steps := 12 * kills // room for every kill at up to ~7 steps per child
	dir := t.TempDir()
	cfg := killConfig(t, dir, steps)
	rng := rand.New(rand.NewPCG(17, uint64(kills)))
	var killedAt []int
	inCheckpoint, inMetrics := 0, 0
	for round := 0; ; round++ {
		if round > 4*kills+20 {
			t.Fatalf("no progress after %d rounds (killed at %v)", round, killedAt)
		}
		child := exec.Command(os.Args[0], "-test.run=^TestKillHarnessChild$")
		child.Env = append(os.Environ(), killChildEnv+"="+dir+"|"+strconv.Itoa(steps))
		stdout, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		child.Stderr = &stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the first step of this child; then let it run for a
		// random time, up to about seven steps (fsync dominates a step).
		stepped := make(chan int, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			sent := false
			last := 0
			for sc.Scan() {
				if s, ok := strings.CutPrefix(sc.Text(), "killharness step "); ok {
					last, _ = strconv.Atoi(s)
					if !sent {
						stepped <- last
						sent = true
					}
				}
			}
			if !sent {
				stepped <- -1
			}
		}()
		var first int
		select {
		case first = <-stepped:
		case <-time.After(3 * time.Minute):
			child.Process.Kill()
			child.Wait()
			t.Fatalf("child %d took over 3 minutes to its first step:\n%s", round, stderr.String())
		}
		if len(killedAt) >= kills || first < 0 {
			if err := child.Wait(); err != nil {
				t.Fatalf("child failed: %v\n%s", err, stderr.String())
			}
			break
		}
		time.Sleep(time.Duration(rng.IntN(150_000)) * time.Microsecond)
		child.Process.Signal(syscall.SIGKILL)
		child.Wait()
		// Where the kill landed: a temporary left by an unfinished
		// checkpoint write, or a torn metrics line.
		if tmps, _ := filepath.Glob(filepath.Join(dir, ".run.ckpt.tmp-*")); len(tmps) > 0 {
			inCheckpoint++
			for _, p := range tmps {
				os.Remove(p)
			}
		}
		if b, _ := os.ReadFile(cfg.Output.MetricsPath); len(b) > 0 && b[len(b)-1] != '\n' {
			inMetrics++
		}
		ck := checkCheckpointIntact(t, cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery, steps)
		checkMetricsPrefix(t, cfg.Output.MetricsPath, ck)
		killedAt = append(killedAt, ck)
	}
	if len(killedAt) < kills*5/6 {
		t.Errorf("the run finished after only %d of %d kills", len(killedAt), kills)
	}
	var evals []int
	for s := cfg.Output.EvalEvery; s < steps; s += cfg.Output.EvalEvery {
		evals = append(evals, s)
	}
	evals = append(evals, steps)
	checkMetricsFile(t, cfg.Output.MetricsPath, steps, evals)
	var res Result
	if b, err := os.ReadFile(filepath.Join(dir, "result.json")); err != nil || json.Unmarshal(b, &res) != nil {
		t.Fatalf("no result: %v", err)
	}
	if fmt.Sprint(evalSteps(&res)) != fmt.Sprint(evals) {
		t.Fatalf("result evaluations %v, want %v", evalSteps(&res), evals)
	}
	resumed, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	straight, err := New(context.Background(), killConfig(t, "", steps))
	if err != nil {
		t.Fatal(err)
	}
	for !straight.Done() {
		if _, err := straight.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sameParams(t, resumed.Model().Params(), straight.Model().Params(), "killed and resumed")
	t.Logf("%d kills (%d inside a checkpoint write, %d inside a metrics line; checkpoint step after each: %v); final parameters bit-identical, metrics complete",
		len(killedAt), inCheckpoint, inMetrics, killedAt)
}
