package nn

// WithoutSegments turns off multi-segment products (Options.noSegments)
// for the external benchmarks.
func WithoutSegments(o *Options) { o.noSegments = true }
