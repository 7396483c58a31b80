package models

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/internal/atomicfile"
)

// ErrCorruptFile is wrapped by Load for data that is not an intact model
// file this build can read: bad checksum, truncation, another format
// version, an unknown architecture or parameters that do not fit it.
var ErrCorruptFile = errors.New("corrupt or unreadable model file")

// A model file is atomicfile's sealed envelope (kind "dpmf-model", SHA-256 over
// the payload) whose payload is a msgpack filePayload. Version 2 describes
// the model by its layers (Architecture); version 1 named one of three
// constructors and is still read (legacy.go).
const (
	fileMagic   = "dpmf-model"
	fileVersion = 2
	// maxFileParams bounds the parameters accepted from a file (1 GiB of
	// float32), so a corrupt header cannot ask for an absurd allocation.
	maxFileParams = 1 << 28
)

// Privacy is the differential-privacy claim of the run that produced a
// model, so that whoever uses the model knows what guarantee it carries
// with respect to the training data.
type Privacy struct {
	// Private is false for a model trained without differential privacy:
	// it carries no guarantee at all.
	Private bool `msgpack:"private" json:"private"`
	// Epsilon and Delta are the (epsilon, delta) spent by the whole run.
	Epsilon float64 `msgpack:"epsilon,omitempty" json:"epsilon,omitempty"`
	Delta   float64 `msgpack:"delta,omitempty" json:"delta,omitempty"`
	// Mechanism and Accountant name the noise mechanism (e.g. "dpsgd",
	// "bandmf:4") and the accountant ("pld", "rdp") as the run's plan
	// names them.
	Mechanism  string `msgpack:"mechanism,omitempty" json:"mechanism,omitempty"`
	Accountant string `msgpack:"accountant,omitempty" json:"accountant,omitempty"`
	// Unit is the unit of privacy the claim protects: "example" (also
	// when empty, in files written before it was recorded) or "user" (all
	// examples of one owner).
	Unit string `msgpack:"unit,omitempty" json:"unit,omitempty"`
	// Assumptions are those the guarantee rests on (adjacency, sampling,
	// noise generation), as the run's ledger states them.
	Assumptions []string `msgpack:"assumptions,omitempty" json:"assumptions,omitempty"`
	// Notes qualify the claim, e.g. that the noise came from a caller's
	// seed.
	Notes []string `msgpack:"notes,omitempty" json:"notes,omitempty"`
}

// String is a one-line statement of the claim.
func (p Privacy) String() string {
	if !p.Private {
		return "non-private: no differential privacy guarantee"
	}
	s := fmt.Sprintf("(epsilon %.4g, delta %.3g)-DP, mechanism %s, %s accounting", p.Epsilon, p.Delta, p.Mechanism, p.Accountant)
	if p.Unit != "" && p.Unit != "example" {
		s = fmt.Sprintf("(epsilon %.4g, delta %.3g)-DP per %s, mechanism %s, %s accounting", p.Epsilon, p.Delta, p.Unit, p.Mechanism, p.Accountant)
	}
	if len(p.Notes) > 0 {
		s += "; " + strings.Join(p.Notes, "; ")
	}
	return s
}

// Metadata says where a model file's parameters came from.
type Metadata struct {
	// Dataset names the training data, e.g. "fashion-mnist/train".
	Dataset string `msgpack:"dataset" json:"dataset"`
	// Classes is the number of classes of the dataset.
	Classes int `msgpack:"classes" json:"classes"`
	// Steps is the number of training steps taken.
	Steps int `msgpack:"steps,omitempty" json:"steps,omitempty"`
	// Batch is the run's expected batch size, which is also the block its
	// evaluations ran in: evaluating in blocks of Batch repeats the
	// run's evaluation bit for bit (the executor's float32 sums depend
	// on how a batch is split).
	Batch   int     `msgpack:"batch,omitempty" json:"batch,omitempty"`
	Privacy Privacy `msgpack:"privacy" json:"privacy"`
	// Columns, for a model trained on a CSV table, say how a row of a new
	// table is encoded as the model's input (nil for images).
	Columns *Columns `msgpack:"columns,omitempty" json:"columns,omitempty"`
	// Features names the fixed per-example transform the model reads
	// ("scatter": Scattering with J = 2, L = 8), applied to new inputs
	// before the model; empty for pixels.
	Features string `msgpack:"features,omitempty" json:"features,omitempty"`
}

// Columns are the columns of a CSV table a model was trained on and the
// encoding of its categorical values, as package data's ReadCSV made them:
// an input is the Numeric columns in this order, then one id per
// Categorical column (level l of Levels[j] is id l+1, an unseen value 0).
type Columns struct {
	Label       string     `msgpack:"label" json:"label"`
	Numeric     []string   `msgpack:"numeric" json:"numeric"`
	Categorical []string   `msgpack:"categorical" json:"categorical"`
	Levels      [][]string `msgpack:"levels" json:"levels"`
	// Classes are the label values; class k is Classes[k].
	Classes []string `msgpack:"classes" json:"classes"`
}

// filePayload is what the envelope's checksum covers. Params are the
// model's parameters as little-endian float32, in Layout order.
type filePayload struct {
	Arch   Architecture `msgpack:"arch"`
	Meta   Metadata     `msgpack:"meta"`
	Params []byte       `msgpack:"params"`
}

// Save writes m with its metadata as a model file: a versioned envelope
// holding the architecture, the metadata and the parameters, checksummed
// with SHA-256. Load reads it back bit for bit.
func Save(w io.Writer, m Model, meta Metadata) error {
	if m == nil {
		return dpcore.Invalid("models", "save: nil model")
	}
	a, ok := m.(Architected)
	if !ok {
		return dpcore.Invalid("models", "save: model %s (%T) cannot describe its architecture", m.Name(), m)
	}
	params := m.Params()
	for i, v := range params {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return dpcore.Invalid("models", "save: parameter %d is %v", i, v)
		}
	}
	b, err := atomicfile.MarshalState(fileMagic, fileVersion, &filePayload{Arch: a.Architecture(), Meta: meta, Params: atomicfile.AppendFloats(nil, params)})
	if err != nil {
		return fmt.Errorf("models: save: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("models: save: %w", err)
	}
	return nil
}

// WriteFile saves m to path atomically (package atomicfile): a crash at any
// moment leaves the old file or the new one, never a torn one.
func WriteFile(path string, m Model, meta Metadata) error {
	var b bytes.Buffer
	if err := Save(&b, m, meta); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, b.Bytes()); err != nil {
		return fmt.Errorf("models: %w", err)
	}
	return nil
}

// Load reads a model file written by Save or WriteFile (or by an earlier
// build, format version 1), verifies its format version and checksum,
// rebuilds the network from its layer description, checks that the layers
// make exactly the parameter tensors the file lists and fills them in.
// Errors are one line and wrap ErrCorruptFile (or r's error).
func Load(r io.Reader) (*Trained, error) {
	blob, err := io.ReadAll(io.LimitReader(r, 4*maxFileParams+1<<20+1))
	if err != nil {
		return nil, fmt.Errorf("models: load: %w", err)
	}
	if len(blob) > 4*maxFileParams+1<<20 {
		return nil, fmt.Errorf("models: load: %w: larger than %d bytes", ErrCorruptFile, 4*maxFileParams+1<<20)
	}
	payload, err := atomicfile.Open(blob, fileMagic, fileVersion)
	if err != nil {
		if old, err1 := atomicfile.Open(blob, fileMagic, 1); err1 == nil {
			return loadV1(old)
		}
		why := atomicfile.Reason(err)
		return nil, fmt.Errorf("models: load: %w: %s", ErrCorruptFile, why)
	}
	var p filePayload
	if err := atomicfile.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("models: load: %w: payload: %s", ErrCorruptFile, strings.TrimPrefix(atomicfile.Reason(err), "models: "))
	}
	if n := len(p.Params); n%4 != 0 || n/4 > maxFileParams {
		return nil, fmt.Errorf("models: load: %w: %d parameter bytes", ErrCorruptFile, n)
	}
	m, err := p.Arch.build(0, true, len(p.Params)/4)
	if err != nil {
		return nil, fmt.Errorf("models: load: %w: %s", ErrCorruptFile, dpcore.Within("models", err))
	}
	return fill(m, p.Meta, p.Params)
}

// fill copies the little-endian float32 parameters of a file into m.
func fill(m Model, meta Metadata, raw []byte) (*Trained, error) {
	params := m.Params()
	if len(raw) != 4*len(params) {
		return nil, fmt.Errorf("models: load: %w: %d parameters for a %s of %d", ErrCorruptFile, len(raw)/4, m.Name(), len(params))
	}
	if _, err := atomicfile.ReadFloats(params, raw); err != nil {
		return nil, fmt.Errorf("models: load: %w: %s", ErrCorruptFile, atomicfile.Reason(err))
	}
	for i, v := range params {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("models: load: %w: parameter %d is %v", ErrCorruptFile, i, v)
		}
	}
	return &Trained{Model: m, Architecture: m.(Architected).Architecture(), Metadata: meta}, nil
}

// ReadFile is Load from the file at path.
func ReadFile(path string) (*Trained, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("models: %w", err)
	}
	defer f.Close()
	t, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return t, nil
}
