package distributed

import (
	"bufio"
	"context"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/dpmf-go/dpmf/train"
)

// The coordinator processes of TestCoordinatorKilledResumes are this test
// binary, re-executed with coordChildEnv = "url|token|dir".
const coordChildEnv = "DPMF_DISTRIBUTED_COORD_CHILD"

func coordConfig(t testing.TB, dir string) train.Config {
	cfg := testConfig(t, killSteps)
	cfg.Output.EvalEvery = 10
	cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery = filepath.Join(dir, "run.ckpt"), 3
	cfg.Output.MetricsPath = filepath.Join(dir, "metrics.jsonl")
	return cfg
}

func TestCoordinatorChild(t *testing.T) {
	spec := os.Getenv(coordChildEnv)
	if spec == "" {
		t.Skip("skipped because it runs only as the coordinator process of TestCoordinatorKilledResumes")
	}
	f := strings.Split(spec, "|")
	cfg := coordConfig(t, f[2])
	m, err := train.NewModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Model.Built = m
	out := bufio.NewWriter(os.Stdout)
	cfg.Output.OnStep = func(sm train.StepMetrics) {
		out.WriteString("coordinator step " + strconv.Itoa(sm.Step) + "\n")
		out.Flush()
	}
	opt := Options{Run: "coordkill", Workers: 3, RequestTimeout: 5 * time.Second, Wait: time.Minute}
	if _, err := Run(context.Background(), connect(t, f[0], f[1]), cfg, opt); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 0, 4*len(m.Params()))
	for _, v := range m.Params() {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	if err := atomicfile.WriteFile(filepath.Join(f[2], "params.bin"), b); err != nil {
		t.Fatal(err)
	}
}

// The coordinator (noise owner, checkpoints) killed with SIGKILL at random
// steps, twice, and started again each time, with the same three workers
// serving throughout: the run resumes from its last checkpoint and ends
// with the parameters of the uninterrupted run bit for bit and every step
// in the metrics once.
func TestCoordinatorKilledResumes(t *testing.T) {
	if os.Getenv(coordChildEnv) != "" || os.Getenv(workerChildEnv) != "" {
		t.Skip("skipped because this process is the child the test started")
	}
	cfg := testConfig(t, killSteps)
	cfg.Output.EvalEvery = 10
	_, want, _ := run(t, cfg, 3)

	url, token := natsServer(t)
	inProcessWorkers(t, url, token, cfg, Options{Run: "coordkill", Workers: 3})
	dir := t.TempDir()
	start := func(killAt int) error {
		c := exec.Command(os.Args[0], "-test.run=^TestCoordinatorChild$")
		c.Env = append(os.Environ(), coordChildEnv+"="+strings.Join([]string{url, token, dir}, "|"))
		c.Stderr = os.Stderr
		out, err := c.StdoutPipe()
		if err != nil {
			return err
		}
		if err := c.Start(); err != nil {
			return err
		}
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if killAt > 0 && sc.Text() == "coordinator step "+strconv.Itoa(killAt) {
				c.Process.Kill()
				break
			}
		}
		go func() {
			for sc.Scan() {
			}
		}()
		return c.Wait()
	}
	seed := uint64(time.Now().UnixNano())
	killAt := []int{int(4 + seed%10), int(16 + (seed/10)%10)}
	for _, k := range killAt {
		if err := start(k); err == nil {
			t.Fatalf("the coordinator killed at step %d exited cleanly", k)
		}
	}
	if err := start(0); err != nil {
		t.Fatalf("the last coordinator: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "params.bin"))
	if err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(b)/4)
	for i := range got {
		got[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	t.Logf("coordinator killed at steps %v", killAt)
	sameParams(t, want, got)
	checkEveryStepOnce(t, metricsSteps(t, filepath.Join(dir, "metrics.jsonl")), killSteps)
}
