package train

import (
	"fmt"

	"github.com/dpmf-go/dpmf/clip"
	"github.com/dpmf-go/dpmf/models"
)

// NewModel builds the model cfg describes (cfg.Model.Built itself when set,
// else cfg.Model.Name for cfg.Train's shape and classes), initialized from
// cfg.Seed exactly as Run would. Set the result as cfg.Model.Built to keep a
// handle on the parameters Run trains, e.g. to save the final model.
func NewModel(cfg Config) (models.Model, error) {
	if cfg.Model.Backend != nil && cfg.Model.Built == nil {
		return nil, invalidf("new model: Config.Model.Backend is set, and it is the model")
	}
	if cfg.Model.Built == nil && (cfg.Data.Train == nil || cfg.Data.Train.Len() == 0) {
		return nil, invalidf("no training data to shape the model")
	}
	cfg.Defaults()
	seed, err := seed64(cfg.Privacy.Seed, "model")
	if err != nil {
		return nil, err
	}
	return buildModel(&cfg, seed)
}

// Check refuses, with the error New would give, a configuration New
// refuses before building anything: CheckSettings, the checks against
// the data (batch size, bands, model size) and, for a private
// example-level run, what the planner refuses before it builds a
// factorization (privacy.CheckRequest: more bands than steps, say), and
// per-layer clip bounds that do not match the model's layers. Unset
// settings take their defaults first.
func (c Config) Check() error {
	c.Defaults()
	if err := c.validate(); err != nil {
		return err
	}
	if err := c.checkClipPerLayer(); err != nil {
		return err
	}
	return c.checkPlan()
}

// checkClipPerLayer refuses, as newEngine would, per-layer clip bounds
// whose count is not the model's layers with parameters: it builds the
// model and a one-example engine (Check). A Model.Backend's engine is
// left to New.
func (c *Config) checkClipPerLayer() error {
	if len(c.Model.ClipPerLayer) == 0 || c.NonPrivate || c.Model.Backend != nil {
		return nil
	}
	seed, err := seed64(c.Privacy.Seed, "model")
	if err != nil {
		return err
	}
	m, err := buildModel(c, seed)
	if err != nil {
		return err
	}
	if _, err := clip.New(m, clip.Options{Norm: c.Privacy.ClipNorm, PerLayer: c.Model.ClipPerLayer, MaxBatch: 1}); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}
