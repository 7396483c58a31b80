package train

import "github.com/dpmf-go/dpmf/models"

// NewModel builds the model cfg describes (cfg.Model itself when set,
// else cfg.ModelName for cfg.Train's shape and classes), initialized from
// cfg.Seed exactly as Run would. Set the result as cfg.Model to keep a
// handle on the parameters Run trains, e.g. to save the final model.
func NewModel(cfg Config) (models.Model, error) {
	if cfg.Backend != nil && cfg.Model == nil {
		return nil, invalidf("new model: Config.Backend is set, and it is the model")
	}
	if cfg.Model == nil && (cfg.Train == nil || cfg.Train.Len() == 0) {
		return nil, invalidf("no training data to shape the model")
	}
	cfg.Defaults()
	return buildModel(&cfg)
}
