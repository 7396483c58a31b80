package models

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/dpmf-go/dpmf/internal/atomicfile"
	"github.com/vmihailenco/msgpack/v5"
)

// ErrCorruptFile is wrapped by Load for data that is not an intact model
// file this build can read: bad checksum, truncation, another format
// version, an unknown architecture or parameters that do not fit it.
var ErrCorruptFile = errors.New("corrupt or unreadable model file")

// A model file is atomicfile's sealed envelope (kind "dpmf-model", SHA-256 over
// the payload) whose payload is a msgpack filePayload.
const (
	fileMagic   = "dpmf-model"
	fileVersion = 1
	// maxFileParams bounds the parameters accepted from a file (1 GiB of
	// float32), so a corrupt header cannot ask for an absurd allocation.
	maxFileParams = 1 << 28
)

// Architecture describes a model well enough to rebuild it: today the
// arguments of the named constructors. Name selects the constructor
// ("logistic", "mlp", "cifarcnn"); Hidden and Activation are the MLP's.
// A model assembled from a layer list will be recorded under its own Name
// with the list in a new field; a build that does not know a Name refuses
// the file with an error that says so.
type Architecture struct {
	Name       string `msgpack:"name" json:"name"`
	Input      [3]int `msgpack:"input" json:"input"` // (channels, height, width)
	Classes    int    `msgpack:"classes" json:"classes"`
	Hidden     []int  `msgpack:"hidden,omitempty" json:"hidden,omitempty"`
	Activation string `msgpack:"activation,omitempty" json:"activation,omitempty"`
}

// Architecture implements Architected.
func (m *seq) Architecture() Architecture {
	return Architecture{Name: m.name, Input: m.in, Classes: m.classes,
		Hidden: slices.Clone(m.hidden), Activation: m.act}
}

// Architected is implemented by models that can describe themselves for a
// model file; all models of this package do.
type Architected interface {
	Architecture() Architecture
}

// New builds a model of this architecture with freshly initialized
// parameters (seed as for the constructors).
func (a Architecture) New(seed uint64) (Model, error) {
	switch a.Name {
	case "logistic":
		return NewLogistic(a.Input, a.Classes, seed)
	case "mlp":
		return NewMLP(a.Input, a.Hidden, a.Classes, a.Activation, seed)
	case "cifarcnn":
		return NewCIFARCNN(a.Input, a.Classes, seed)
	}
	return nil, fmt.Errorf("models: architecture %q is not known to this build (want logistic, mlp or cifarcnn): %w", a.Name, ErrInvalid)
}

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
	Steps   int     `msgpack:"steps,omitempty" json:"steps,omitempty"`
	Privacy Privacy `msgpack:"privacy" json:"privacy"`
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
		return fmt.Errorf("models: save: nil model: %w", ErrInvalid)
	}
	a, ok := m.(Architected)
	if !ok {
		return fmt.Errorf("models: save: model %s (%T) cannot describe its architecture: %w", m.Name(), m, ErrInvalid)
	}
	params := m.Params()
	for i, v := range params {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("models: save: parameter %d is %v: %w", i, v, ErrInvalid)
		}
	}
	buf := make([]byte, 4*len(params))
	for i, v := range params {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
	}
	payload, err := msgpack.Marshal(&filePayload{Arch: a.Architecture(), Meta: meta, Params: buf})
	if err != nil {
		return fmt.Errorf("models: save: %w", err)
	}
	b, err := atomicfile.Seal(fileMagic, fileVersion, payload)
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

// Load reads a model file written by Save or WriteFile, verifies its
// format version and checksum, rebuilds the architecture and fills in the
// parameters. Errors are one line and wrap ErrCorruptFile (or r's error).
func Load(r io.Reader) (*Trained, error) {
	payload, err := atomicfile.Unseal(r, fileMagic, fileVersion, 4*maxFileParams+1<<20)
	if err != nil {
		if errors.Is(err, atomicfile.ErrCorrupt) {
			why := strings.TrimPrefix(err.Error(), "atomicfile: "+atomicfile.ErrCorrupt.Error()+": ")
			return nil, fmt.Errorf("models: load: %w: %s", ErrCorruptFile, why)
		}
		return nil, fmt.Errorf("models: load: %w", err)
	}
	var p filePayload
	if err := msgpack.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("models: load: %w: payload: %v", ErrCorruptFile, err)
	}
	if n := len(p.Params); n%4 != 0 || n/4 > maxFileParams {
		return nil, fmt.Errorf("models: load: %w: %d parameter bytes", ErrCorruptFile, n)
	}
	want, err := p.Arch.numParams()
	if err != nil {
		return nil, fmt.Errorf("models: load: %w: %v", ErrCorruptFile, err)
	}
	if want != float64(len(p.Params)/4) {
		return nil, fmt.Errorf("models: load: %w: %d parameters for a %s that has %.0f", ErrCorruptFile, len(p.Params)/4, p.Arch.Name, want)
	}
	m, err := p.Arch.New(0)
	if err != nil {
		return nil, fmt.Errorf("models: load: %w: %v", ErrCorruptFile, strings.TrimPrefix(err.Error(), "models: "))
	}
	params := m.Params()
	if len(p.Params) != 4*len(params) {
		return nil, fmt.Errorf("models: load: %w: %d parameters for a %s of %d", ErrCorruptFile, len(p.Params)/4, m.Name(), len(params))
	}
	for i := range params {
		v := math.Float32frombits(binary.LittleEndian.Uint32(p.Params[4*i:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return nil, fmt.Errorf("models: load: %w: parameter %d is %v", ErrCorruptFile, i, v)
		}
		params[i] = v
	}
	return &Trained{Model: m, Architecture: p.Arch, Metadata: p.Meta}, nil
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

// numParams is the number of parameters of the architecture, computed in
// float64 so that no corrupt (or hostile) description can overflow it,
// or an error for a description that is out of range; Load compares it
// with the parameters present before it allocates anything.
func (a Architecture) numParams() (float64, error) {
	size := 1.0
	for _, d := range a.Input {
		if d <= 0 || d > 1<<20 {
			return 0, fmt.Errorf("input shape %v", a.Input)
		}
		size *= float64(d)
	}
	if a.Classes < 2 || a.Classes > 1<<20 {
		return 0, fmt.Errorf("%d classes", a.Classes)
	}
	if len(a.Hidden) > 1<<10 {
		return 0, fmt.Errorf("%d hidden layers", len(a.Hidden))
	}
	k := float64(a.Classes)
	switch a.Name {
	case "logistic":
		return (size + 1) * k, nil
	case "mlp":
		n, prev := 0.0, size
		for _, h := range a.Hidden {
			if h <= 0 {
				return 0, fmt.Errorf("hidden width %d", h)
			}
			n += (prev + 1) * float64(h)
			prev = float64(h)
		}
		return n + (prev+1)*k, nil
	case "cifarcnn":
		n, c := 0.0, float64(a.Input[0])
		for _, out := range []float64{32, 64, 128} {
			n += (9*c+1)*out + (9*out+1)*out
			c = out
		}
		flat := float64(a.Input[1]/8) * float64(a.Input[2]/8) * 128
		return n + (flat+1)*128 + (128+1)*k, nil
	}
	return 0, fmt.Errorf("architecture %q is not known to this build (want logistic, mlp or cifarcnn)", a.Name)
}
