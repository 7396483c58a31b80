package nn

// WithGarbage makes implicit convolutions compute their garbage columns
// and rows too (Options.noSkipGarbage, noRowRuns), for the external
// benchmarks.
func WithGarbage(o *Options) { o.noSkipGarbage, o.noRowRuns = true, true }
