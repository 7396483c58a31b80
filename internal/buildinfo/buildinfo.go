// Package buildinfo reports what a binary was built from: the module
// version and the version-control commit recorded by the Go toolchain
// (runtime/debug.ReadBuildInfo), for the -version flags of the commands.
package buildinfo

import (
	"fmt"
	"runtime/debug"
)

// Info is the build's identity. Fields the toolchain did not record are
// empty (a test binary, or a build outside a repository).
type Info struct {
	// Module is the main module's path and Version its version ("(devel)"
	// for a build from a checkout).
	Module, Version string
	// Commit and Time are the commit (vcs.revision) and its time; Modified
	// says the working tree had uncommitted changes.
	Commit, Time string
	Modified     bool
	// Go is the toolchain version.
	Go string
}

// Read returns the running binary's build information.
func Read() Info { return fromBuildInfo(debug.ReadBuildInfo()) }

func fromBuildInfo(bi *debug.BuildInfo, ok bool) Info {
	if !ok || bi == nil {
		return Info{}
	}
	info := Info{Module: bi.Main.Path, Version: bi.Main.Version, Go: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is one line: "MODULE VERSION, commit COMMIT (TIME)[, modified],
// GO"; unknown parts are said to be unknown.
func (i Info) String() string {
	or := func(s, def string) string {
		if s == "" {
			return def
		}
		return s
	}
	s := fmt.Sprintf("%s %s, commit %s", or(i.Module, "(unknown module)"), or(i.Version, "(unknown version)"), or(i.Commit, "unknown"))
	if i.Time != "" {
		s += " (" + i.Time + ")"
	}
	if i.Modified {
		s += ", modified"
	}
	return s + ", " + or(i.Go, "unknown Go")
}
