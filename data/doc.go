// Package data loads and prepares image classification datasets for private
// training: CIFAR-10 and CIFAR-100 (binary version), MNIST and Fashion-MNIST
// (IDX files, gzipped or not), a synthetic CIFAR-shaped generator for
// benchmarks, and an embedded class-balanced subset of real Fashion-MNIST so
// a default run needs no download. It also turns text corpora (plain text,
// JSON lines with optional user and label fields, fortune cookies) into
// data sets of token ids for next-token prediction or sequence
// classification (LoadText, NewTextDataset), tokenized by package text.
//
// A Dataset holds every example in memory as float32 features in CHW order
// with integer labels. Batch gathers examples into caller-owned buffers
// without allocating; Augmenter applies random crops and flips that depend
// only on (seed, step, example index), so a resumed run sees the same
// augmented batches as an uninterrupted one.
//
// Privacy note: statistics computed on the training set (ChannelStats,
// NormalizeTrainTest, ClassCounts, DetectIDXContent's figures, a
// vocabulary read by ReadCSV) are exact functions of the private data and
// not covered by any guarantee. Normalization statistics are
// conventionally treated as public (the papers and Opacus do), but for the
// guarantee to hold use published constants or a public dataset's
// statistics; Normalize accepts any mean and std.
package data
