package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestLineNamesModuleVersionAndCommit(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.24.0", Main: debug.Module{Path: "github.com/dpmf-go/dpmf", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}}}
	got := fromBuildInfo(bi).line("train")
	want := "train github.com/dpmf-go/dpmf v0.3.0, commit 0123abcd (modified), go1.24.0"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	got = fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.24.0", Main: debug.Module{Path: "m"}}).line("x")
	if got != "x m (unknown), commit unknown, go1.24.0" {
		t.Fatalf("got %q", got)
	}
}

func TestLineOfTestBinary(t *testing.T) {
	if l := Line("train"); !strings.HasPrefix(l, "train ") {
		t.Fatalf("%q", l)
	}
}
