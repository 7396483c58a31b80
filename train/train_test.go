package train

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/data"
	"github.com/dpmf-go/dpmf/mfnoise"
	"github.com/dpmf-go/dpmf/privacy"
)

// blobs is a 4-class problem on 1x4x4 inputs: class c has mean +2 on pixel
// block c, so a logistic model separates it well.
func blobs(t testing.TB, m int, seed uint64) *data.Dataset {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, m*16)
	y := make([]int, m)
	for i := 0; i < m; i++ {
		c := i % 4
		y[i] = c
		for p := 0; p < 16; p++ {
			v := r.NormFloat64()
			if p/4 == c {
				v += 2
			}
			x[i*16+p] = float32(v)
		}
	}
	ds, err := data.NewDataset(x, y, data.Shape{C: 1, H: 4, W: 4}, 4)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// parseMech is the mechanism named as on the command line.
func parseMech(t testing.TB, name string) privacy.Mechanism {
	t.Helper()
	m, err := privacy.ParseMechanism(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func baseConfig(t testing.TB) Config {
	return Config{
		Data:      Data{Train: blobs(t, 2000, 1), Test: blobs(t, 400, 2)},
		Model:     ModelSpec{Name: "logistic"},
		Privacy:   privacy.Request{Steps: 40, Batch: 50, Mechanism: mfnoise.DPSGD{}, Epsilon: 8, ClipNorm: 1, Seed: []byte("test seed"), InsecureSeed: true},
		Optimizer: Optimizer{LearningRate: 0.5},
		Output:    Output{EvalEvery: 1000},
	}
}

// sampledBy sets a run's mechanism, sampling and bands.
func sampledBy(t *testing.T, mech string, s privacy.Sampling, bands int) func(*Config) {
	return func(c *Config) {
		c.Privacy.Mechanism, c.Privacy.Sampling, c.Privacy.Partitions = parseMech(t, mech), s, bands
	}
}

func TestRefusesCombinationsWhoseGuaranteeDoesNotHold(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		edit func(*Config)
	}{
		{"amplified accounting with fixed-order epochs", sampledBy(t, "tree-online", privacy.SamplingPoisson, 0)},
		{"bands larger than the sampler's separation", sampledBy(t, "bandmf:8", privacy.SamplingBandPoisson, 4)},
		{"mf-kb with Poisson sampling", sampledBy(t, "mf-kb", privacy.SamplingPoisson, 0)},
		{"dense encoder with band sampling", sampledBy(t, "mf-single", privacy.SamplingBandPoisson, 4)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig(t)
			tc.edit(&cfg)
			_, err := New(ctx, cfg)
			if !errors.Is(err, privacy.ErrRefused) {
				t.Fatalf("want a refusal, got %v", err)
			}
			t.Logf("refused: %v", err)
		})
	}
}

func TestRejectsBadInput(t *testing.T) {
	ctx := context.Background()
	cases := map[string]func(*Config){
		"batch larger than the data": func(c *Config) { c.Privacy.Batch = 5000 },
		"epsilon <= 0":               func(c *Config) { c.Privacy.Epsilon = -1 },
		"delta outside (0,1)":        func(c *Config) { c.Privacy.Delta = 1.5 },
		"no epsilon and no sigma":    func(c *Config) { c.Privacy.Epsilon = 0 },
		"bands > n":                  func(c *Config) { c.Privacy.Mechanism = parseMech(t, "bandmf:41") },
		"unknown accountant":         func(c *Config) { c.Privacy.Accountant = "moments" },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig(t)
			edit(&cfg)
			if _, err := New(ctx, cfg); err == nil {
				t.Fatal("accepted")
			} else {
				t.Logf("error: %v", err)
			}
		})
	}
}

func TestPlanRecordsCalibratedPrivacy(t *testing.T) {
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism = mfnoise.BandMF{Bands: 4}
	cfg.Optimizer.Momentum = 0.9
	tr, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Plan()
	if p.Sampling != privacy.SamplingBandPoisson || !p.Amplified || p.Accounting.Compositions != 10 {
		t.Fatalf("plan %+v: want band-poisson amplified accounting with ceil(40/4) = 10 compositions", p)
	}
	if p.Epsilon > 8 || p.Epsilon < 7.9 || p.Delta != 1e-5/2 && p.Delta != 1e-5 && p.Delta != 1.0/2000 {
		t.Fatalf("calibrated epsilon %v delta %v", p.Epsilon, p.Delta)
	}
	if math.Abs(p.Sensitivity.Value-1) > 1e-9 {
		t.Fatalf("bandmf column norms should be 1, sensitivity %v", p.Sensitivity.Value)
	}
	if math.Abs(p.NoiseStd-p.NoiseMultiplier*cfg.Privacy.ClipNorm) > 1e-12 {
		t.Fatalf("noise std %v != sigma*zeta*sens %v", p.NoiseStd, p.NoiseMultiplier)
	}
}

func TestPrivateTrainingLearns(t *testing.T) {
	for _, mech := range []string{"dpsgd", "bandmf:4", "tree-online"} {
		t.Run(mech, func(t *testing.T) {
			cfg := baseConfig(t)
			// RDP keeps the per-step epsilon (about 35 accountant calls
			// per run) cheap; PLD runs in ExampleRun and the plan tests.
			cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Privacy.Accountant = parseMech(t, mech), 80, privacy.RDP
			if mech != "dpsgd" {
				cfg.Optimizer.Momentum = 0.9
				cfg.Optimizer.LearningRate = 0.1
			}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			// Chance is 0.25; the noiseless optimum is about 0.98.
			if res.Final.Accuracy < 0.8 {
				t.Fatalf("%s: test accuracy %.3f after %d steps at epsilon %.3g", mech, res.Final.Accuracy, res.Steps, res.Final.Epsilon)
			}
			if res.Final.Epsilon <= 0 || res.Final.Epsilon > 8*(1+1e-6) {
				t.Fatalf("final epsilon %v", res.Final.Epsilon)
			}
			t.Logf("%s: accuracy %.3f epsilon %.3f sigma %.3f", mech, res.Final.Accuracy, res.Final.Epsilon, res.Plan.NoiseMultiplier)
		})
	}
}

// The resume test runs the same training in a child process (this test
// binary, re-executed), kills it with SIGKILL after it has written a
// checkpoint, resumes in this process, and compares the final parameters
// bit for bit with an uninterrupted run.
const childEnv = "DPMF_TRAIN_CHILD_CHECKPOINT"

func resumeConfig(t testing.TB, ckpt string) Config {
	cfg := baseConfig(t)
	cfg.Privacy.Mechanism, cfg.Privacy.Steps, cfg.Optimizer.Momentum, cfg.Optimizer.LearningRate = mfnoise.BandMF{Bands: 4}, 60, 0.9, 0.1
	cfg.Output.CheckpointPath, cfg.Output.CheckpointEvery = ckpt, 5
	return cfg
}

func TestChildTrainingProcess(t *testing.T) {
	ckpt := os.Getenv(childEnv)
	if ckpt == "" {
		t.Skip("skipped because it runs only as the child process of TestKillAndResumeIsBitIdentical")
	}
	cfg := resumeConfig(t, ckpt)
	cfg.Output.OnStep = func(StepMetrics) { time.Sleep(20 * time.Millisecond) }
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

func TestKillAndResumeIsBitIdentical(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "run.ckpt")
	child := exec.Command(os.Args[0], "-test.run=^TestChildTrainingProcess$")
	child.Env = append(os.Environ(), childEnv+"="+ckpt)
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	deadline := time.After(2 * time.Minute)
	for {
		if _, err := os.Stat(ckpt); err == nil {
			break
		}
		select {
		case err := <-exited:
			t.Fatalf("child exited before writing a checkpoint: %v", err)
		case <-deadline:
			child.Process.Kill()
			t.Fatal("child wrote no checkpoint")
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(150 * time.Millisecond) // land the kill between checkpoints
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited

	resumed, err := New(context.Background(), resumeConfig(t, ckpt))
	if err != nil {
		t.Fatal(err)
	}
	from := resumed.Step()
	if from == 0 || from >= 60 {
		t.Fatalf("resumed from step %d: the kill should land mid-run", from)
	}
	for !resumed.Done() {
		if _, err := resumed.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	whole := resumeConfig(t, "")
	straight, err := New(context.Background(), whole)
	if err != nil {
		t.Fatal(err)
	}
	for !straight.Done() {
		if _, err := straight.TrainStep(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	a, b := resumed.Model().Params(), straight.Model().Params()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("resumed from step %d: parameter %d = %v, uninterrupted %v", from, i, a[i], b[i])
		}
	}
	t.Logf("killed child, resumed from step %s: %d parameters bit-identical", strconv.Itoa(from), len(a))
}

func TestCorruptCheckpointIsRefused(t *testing.T) {
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "run.ckpt")
	cfg := resumeConfig(t, ckpt)
	cfg.Privacy.Steps = 10
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	blob, _ := os.ReadFile(ckpt)
	blob[len(blob)/2] ^= 0x40
	os.WriteFile(ckpt, blob, 0o644)
	if _, err := New(context.Background(), cfg); !errors.Is(err, ErrCorruptCheckpoint) {
		t.Fatalf("flipped bit: want ErrCorruptCheckpoint, got %v", err)
	}
}
