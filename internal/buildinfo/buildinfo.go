// Package buildinfo says which build of a command is running: the module
// version and the commit it was built from, as recorded by the Go
// toolchain (runtime/debug.ReadBuildInfo).
package buildinfo

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// Info is what the toolchain recorded about the running binary.
type Info struct {
	Module   string // module path, e.g. github.com/dpmf-go/dpmf
	Version  string // module version, "(devel)" for a build from a checkout
	Commit   string // VCS revision, "" when not recorded
	Modified bool   // the work tree had uncommitted changes
	Go       string // Go version
}

// Read returns the build information of the running binary; ok is false
// when the binary carries none (built without module support).
func Read() (Info, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{}, false
	}
	return fromBuildInfo(bi), true
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	in := Info{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			in.Commit = s.Value
		case "vcs.modified":
			in.Modified = s.Value == "true"
		}
	}
	return in
}

// Line is one line for a -version flag: "train github.com/dpmf-go/dpmf
// (devel), commit 0123abcd (modified), go1.24".
func Line(program string) string {
	in, ok := Read()
	if !ok {
		return program + ": no build information recorded in this binary"
	}
	return in.line(program)
}

func (in Info) line(program string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", program, orUnknown(in.Module))
	fmt.Fprintf(&b, " %s", orUnknown(in.Version))
	if in.Commit != "" {
		fmt.Fprintf(&b, ", commit %s", in.Commit)
		if in.Modified {
			b.WriteString(" (modified)")
		}
	} else {
		b.WriteString(", commit unknown")
	}
	fmt.Fprintf(&b, ", %s", in.Go)
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
