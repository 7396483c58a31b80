package train

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/dpmf-go/dpmf/dpcore"
	"github.com/dpmf-go/dpmf/models"
)

// MaxSteps is the largest number of steps a run takes: per-step arrays
// (learning rates, sampling and accounting schedules) hold 8 bytes a
// step, and a Toeplitz mechanism's noise source is bounded at this n
// (dpcore.StructuredStepLimit).
const MaxSteps = 1 << 23

// memoryLimit is the memory a run may plan for: the least of GOMEMLIMIT
// (when set), the address-space limit (ulimit -v, when set) and the
// machine's physical memory (Linux's /proc/meminfo); 0 when none is known.
func memoryLimit() int64 {
	limit := physicalMemory()
	for _, l := range []int64{debug.SetMemoryLimit(-1), addressSpaceLimit()} {
		if l > 0 && l < math.MaxInt64 && (limit == 0 || l < limit) {
			limit = l
		}
	}
	return limit
}

// physicalMemory is MemTotal of /proc/meminfo, or 0.
func physicalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) >= 2 && string(f[0]) == "MemTotal:" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err == nil && kb > 0 {
				return kb << 10
			}
		}
	}
	return 0
}

// checkMemory refuses, before anything is allocated, a request whose
// arrays alone need more than the memory limit, saying what it would need.
func checkMemory(what string, need float64) error {
	limit := memoryLimit()
	if limit <= 0 || need <= float64(limit) {
		return nil
	}
	return invalidf("%s would need %s of memory, more than the %s available (physical memory, or GOMEMLIMIT or ulimit -v when set)",
		what, dpcore.HumanBytes(need), dpcore.HumanBytes(float64(limit)))
}

// checkSizes refuses the user-given sizes of a run that cannot fit, before
// the model, the plan or any per-step array is allocated: the number of
// steps, and the parameters of the model (hidden sizes, embedding
// dimension) with the buffers kept per parameter.
func (c *Config) checkSizes() error {
	if c.Steps > MaxSteps {
		return invalidf("steps = %d: per-step arrays would need %s each (8 bytes a step); the limit is %d steps",
			c.Steps, dpcore.HumanBytes(8*float64(c.Steps)), MaxSteps)
	}
	if c.Model != nil || c.Train == nil {
		return nil
	}
	d := c.estimateParams()
	// Parameters, gradient sum, chunk sum, noise row, momentum and one
	// accumulator per worker at least: 8 float32 arrays of d.
	if err := checkMemory(fmt.Sprintf("model %s with %.4g parameters", c.ModelName, d), 8*4*d); err != nil {
		return err
	}
	return nil
}

// estimateParams is the parameter count of a dense model named by the
// configuration (models.Named.EstimateParams).
func (c *Config) estimateParams() float64 {
	return c.namedModel().EstimateParams(c.Train.Shape.Size(), c.Train.Classes)
}

// namedModel is the model c.ModelName names, with its settings.
func (c *Config) namedModel() models.Named {
	return models.Named{Name: c.ModelName, Hidden: c.Hidden, Categorical: c.Categorical, EmbeddingDim: c.EmbeddingDim}
}
