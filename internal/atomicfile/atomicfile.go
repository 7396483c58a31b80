// Package atomicfile writes files so that a crash or kill at any moment
// leaves either the old content or the new, never a torn file: the data go
// to a temporary file in the same directory, which is fsynced, renamed over
// the target, and the directory is fsynced so the rename itself is durable.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Options adjust Write; the zero value is the default, which the
// package-level functions use.
type Options struct {
	// Pause, if positive, is slept between writing the temporary file and
	// syncing and renaming it: crash tests set it to land kills inside a
	// write. Production code leaves it zero.
	Pause time.Duration
}

// CheckWritable reports, without changing anything, whether path can be
// written: it is not a directory, its directory exists and accepts new
// files (Write's temporary), and an existing file opens for writing. Run it
// before long work whose result goes to path.
func CheckWritable(path string) error {
	if path == "" {
		return &PathError{Path: path, Err: errors.New("empty path")}
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return &PathError{Path: path, Err: fmt.Errorf("%s is a directory", path)}
		}
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return &PathError{Path: path, Err: err}
		}
		f.Close()
	} else if !errors.Is(err, os.ErrNotExist) {
		return &PathError{Path: path, Err: err}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		return &PathError{Path: path, Err: fmt.Errorf("cannot create files next to %s: %w", path, err)}
	}
	tmp.Close()
	os.Remove(tmp.Name())
	return nil
}

// Write creates or replaces path with what write produces.
func Write(path string, write func(io.Writer) error) error {
	return Options{}.Write(path, write)
}

// Write creates or replaces path with what write produces.
func (o Options) Write(path string, write func(io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err = write(tmp); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	if o.Pause > 0 {
		time.Sleep(o.Pause)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	// The rename is durable only once the directory entry is; a failure
	// here leaves a complete file, so it is not reported.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteFile is Write for a byte slice.
func WriteFile(path string, data []byte) error { return Options{}.WriteFile(path, data) }

// WriteFile is Write for a byte slice.
func (o Options) WriteFile(path string, data []byte) error {
	return o.Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
