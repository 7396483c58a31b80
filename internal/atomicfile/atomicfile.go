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
	"strconv"
	"time"
)

// SlowWriteEnv names a test-only environment variable: a duration in
// milliseconds for which Write pauses between writing the temporary file
// and renaming it, so crash tests can land kills inside a write.
const SlowWriteEnv = "DPMF_TEST_SLOW_WRITE_MS"

// SlowWriteDelay is the pause SlowWriteEnv asks for (0 when unset).
func SlowWriteDelay() time.Duration {
	ms, err := strconv.Atoi(os.Getenv(SlowWriteEnv))
	if err != nil || ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
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
func Write(path string, write func(io.Writer) error) (err error) {
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
	if d := SlowWriteDelay(); d > 0 {
		time.Sleep(d)
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
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
