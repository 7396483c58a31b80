package nn

// WithGarbage makes implicit convolutions' weight gradients sum over
// their garbage columns (Options.noSkipGarbage), for the external
// benchmarks.
func WithGarbage(o *Options) { o.noSkipGarbage = true }
