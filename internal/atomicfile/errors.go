package atomicfile

import "fmt"

// CorruptError is the error of data that is not a valid file of the kind
// asked for: "atomicfile: corrupt or foreign file: REASON (PATH)". It
// matches ErrCorrupt; callers that wrap it in a corruption error of their
// own call the function Reason instead of cutting its text apart.
type CorruptError struct {
	Reason string
	// Path is the file, when one was read (ReadSealed).
	Path string
}

func (e *CorruptError) Error() string {
	return "atomicfile: " + ErrCorrupt.Error() + ": " + e.detail()
}

// detail is the reason with the path.
func (e *CorruptError) detail() string {
	if e.Path == "" {
		return e.Reason
	}
	return e.Reason + " (" + e.Path + ")"
}

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func corruptf(format string, args ...any) error {
	return &CorruptError{Reason: fmt.Sprintf(format, args...)}
}

// PathError is the error of CheckWritable: why Path cannot be written.
// Its text is "atomicfile: " and the reason; Reason is the reason alone.
type PathError struct {
	Path string
	Err  error
}

func (e *PathError) Error() string { return "atomicfile: " + e.Err.Error() }

// Reason is why the path cannot be written, without the package.
func (e *PathError) Reason() string { return e.Err.Error() }

// Unwrap returns the cause (fs.ErrPermission, ...).
func (e *PathError) Unwrap() error { return e.Err }

// Package is "atomicfile" (for dpcore.Within).
func (e *PathError) Package() string { return "atomicfile" }
