package train

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// Issue 39 item 13: a resume mismatch on a setting one side does not
// record says what that means, in one line: a setting recorded only when
// set names its default, one an earlier version did not record says so.
// Before the fix each read "checkpoint has (not recorded)" (seen failing).
func TestResumeMismatchWording(t *testing.T) {
	ctx := context.Background()
	cfg := shortResumeConfig(t, t.TempDir())
	if _, err := Run(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	refused := func(name string, c Config, want string) {
		t.Helper()
		_, err := New(ctx, c)
		if !errors.Is(err, ErrCorruptCheckpoint) {
			t.Fatalf("%s: %v, want ErrCorruptCheckpoint", name, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, want) || strings.Contains(msg, "(not recorded)") || strings.Contains(msg, "\n") {
			t.Errorf("%s: %q, want one line naming %q", name, msg, want)
		}
	}
	averaged := cfg
	averaged.Optimizer.EMA = &EMA{Decay: 0.9}
	refused("average added", averaged, "parameter average: checkpoint has none (its run did not set it), asked for 0.9")

	// A checkpoint written by an earlier version that recorded settings
	// but not this one.
	ck, err := readCheckpoint(cfg.Output.CheckpointPath)
	if err != nil {
		t.Fatal(err)
	}
	ck.Settings = slices.DeleteFunc(ck.Settings, func(s setting) bool { return s.Name == "per-layer clip" })
	payload, err := msgpack.Marshal(ck)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteSealed(cfg.Output.CheckpointPath, checkpointMagic, checkpointVersion, payload); err != nil {
		t.Fatal(err)
	}
	refused("earlier version", cfg, "per-layer clip: asked for none, but the checkpoint (written by an earlier version) does not record it")

	// The reverse of the first: the checkpoint's run averaged, this one
	// does not.
	cfg2 := averaged
	cfg2.Output.CheckpointPath = cfg.Output.CheckpointPath + "2"
	if _, err := Run(ctx, cfg2); err != nil {
		t.Fatal(err)
	}
	plain := cfg2
	plain.Optimizer.EMA = nil
	refused("average dropped", plain, "parameter average: checkpoint has 0.9, asked for none (not set in this run)")
}
