package main

import (
	"os"
	"path/filepath"
)

// namedPath is a file named by a flag; output says the command writes it.
type namedPath struct {
	flag, path string
	output     bool
}

// refuseSharedPaths refuses two flags that name the same file when the
// command writes one of them (-checkpoint X -save-model X would replace
// the checkpoint with the model, and the run could no longer resume): a
// usage error naming both flags, before any work is done. The same file
// is found however it is spelled: relative or absolute, through a
// symbolic link, or as a hard link. Empty paths and "-" (standard output)
// are skipped.
func refuseSharedPaths(paths ...namedPath) error {
	type seen struct {
		namedPath
		canon string
		info  os.FileInfo
	}
	var all []seen
	for _, p := range paths {
		if p.path == "" || p.path == "-" {
			continue
		}
		s := seen{namedPath: p, canon: canonicalPath(p.path)}
		if st, err := os.Stat(p.path); err == nil && !st.IsDir() {
			s.info = st
		}
		for _, o := range all {
			if !p.output && !o.output {
				continue
			}
			if s.canon == o.canon || s.info != nil && o.info != nil && os.SameFile(s.info, o.info) {
				return usagef("-%s and -%s name the same file %s: give each its own file", o.flag, p.flag, p.path)
			}
		}
		all = append(all, s)
	}
	return nil
}

// canonicalPath is path made absolute with its symbolic links resolved
// (those of its directory when the file does not exist yet).
func canonicalPath(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		return r
	}
	if d, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		return filepath.Join(d, filepath.Base(abs))
	}
	return abs
}

// checkCacheDir refuses a -cache directory that cannot be created or
// written, before any work: a factorization built for minutes would
// otherwise fail to be saved at the end. It creates the directory, as the
// cache would.
func checkCacheDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usagef("-cache %s: cannot create it: %v (-cache \"\" caches nothing)", dir, err)
	}
	f, err := os.CreateTemp(dir, ".check-*")
	if err != nil {
		return usagef("-cache %s: cannot write there: %v (-cache \"\" caches nothing)", dir, err)
	}
	f.Close()
	os.Remove(f.Name())
	return nil
}
