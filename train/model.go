package train

import "github.com/dpmf-go/dpmf/models"

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
	return buildModel(&cfg)
}
