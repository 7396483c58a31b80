package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/dpmf-go/dpmf", Version: "(devel)"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-25T17:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	got := fromBuildInfo(bi, true).String()
	want := "github.com/dpmf-go/dpmf (devel), commit 0123abcd (2026-11-25T17:00:00Z), modified, go1.26.8"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := fromBuildInfo(nil, false).String(); got != "(unknown module) (unknown version), commit unknown, unknown Go" {
		t.Errorf("no build info: %q", got)
	}
}
