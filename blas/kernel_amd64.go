//go:build amd64 && !purego

package blas

import "golang.org/x/sys/cpu"

//go:generate go run asm_gen.go

// Micro-kernels in kernel_amd64.s.

//go:noescape
func sgemmKernel6x16AVX2(kc int, a, b, c *float32, ldc int, overwrite bool)

//go:noescape
func sgemmKernel6x16AVX2Strided(kc int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool)

//go:noescape
func dgemmKernel6x8AVX2(kc int, a, b, c *float64, ldc int, overwrite bool)

//go:noescape
func dgemmKernel6x8AVX2Strided(kc int, a *float64, rs, cs int, b, c *float64, ldc int, overwrite bool)

//go:noescape
func sgemmKernel12x32AVX512(kc int, a, b, c *float32, ldc int, overwrite bool)

//go:noescape
func sgemmKernel12x32AVX512Strided(kc int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool)

//go:noescape
func dgemmKernel12x16AVX512(kc int, a, b, c *float64, ldc int, overwrite bool)

//go:noescape
func sgemmKernel8x32AVX512Strided(kc int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool)

//go:noescape
func sgemmKernel6x16AVX2Runs(runs *int, nruns int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool)

//go:noescape
func sgemmKernel12x32AVX512Runs(runs *int, nruns int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool)

//go:noescape
func dgemmKernel12x16AVX512Strided(kc int, a *float64, rs, cs int, b, c *float64, ldc int, overwrite bool)

//go:noescape
func sgemmKernel12x32AVX512PF(kc int, a, b, c *float32, ldc int, overwrite bool, pf *float32)

//go:noescape
func sgemmKernel12x32AVX512StridedPF(kc int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool, pf *float32)

//go:noescape
func sgemmKernel8x32AVX512StridedPF(kc int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool, pf *float32)

//go:noescape
func sgemmKernel12x32AVX512StridedPFTA(kc int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool, pf *float32)

//go:noescape
func sgemmKernel12x32AVX512RunsTA(runs *int, nruns int, a *float32, rs, cs int, b, c *float32, ldc int, overwrite bool)

// Cache blocking for the target machine class (AMD EPYC Zen 4/5: 32-48 KiB
// L1d, 1 MiB L2 per core, 32 MiB shared L3; Intel server cores are
// similar or larger).
//
//   - kc: the kc×NR micro-panel of B is reused by every MR-row micro-panel
//     of A in the mc block, so it must stay in L1 together with the A
//     micro-panel streaming past it: kc*NR*size about half of 48 KiB.
//   - mc: the mc×kc block of A is reread for every micro-panel of B, so it
//     must sit in L2: mc*kc*size about half of 1 MiB (the other half for
//     B micro-panels and C tiles).
//   - nc: the kc×nc block of B lives in L3 (shared by both cores, each of
//     which packs its own); a few MiB each.
//
// When A is read in place (see kernel.packMin) the same mc rows of A are
// the ones reused from L2 across the micro-panels of B.
//
// Alternatives measured for the AVX-512 float32 kernel (one thread, 192³,
// packed A, loaded machine): kc = 128 or 384 instead of 256, tiles 14×32,
// 8×48 and 6×64, and unrolling 2 or 8 times all ran at 186-198 GFLOP/s,
// within the noise of 12×32 with kc = 256 unrolled 4 times.
func avx2Kernel32() kernel[float32] {
	// B micro-panel 384*16*4 = 24 KiB, A block 336*384*4 = 504 KiB,
	// B block 384*4096*4 = 6 MiB.
	return kernel[float32]{name: "avx2", mr: 6, nr: 16, kc: 384, mc: 336, nc: 4096, fn: sgemmKernel6x16AVX2, strided: sgemmKernel6x16AVX2Strided, runs: sgemmKernel6x16AVX2Runs, packMin: 16, parallelMin: parallelWork}
}

func avx2Kernel64() kernel[float64] {
	// B micro-panel 256*8*8 = 16 KiB, A block 252*256*8 = 504 KiB,
	// B block 256*2048*8 = 4 MiB.
	return kernel[float64]{name: "avx2", mr: 6, nr: 8, kc: 256, mc: 252, nc: 2048, fn: dgemmKernel6x8AVX2, strided: dgemmKernel6x8AVX2Strided, packMin: 16, parallelMin: parallelWork}
}

func avx512Kernel32() kernel[float32] {
	// B micro-panel 256*32*4 = 32 KiB, A block 240*256*4 = 240 KiB,
	// B block 256*4096*4 = 4 MiB.
	return kernel[float32]{name: "avx512", mr: 12, nr: 32, kc: 256, mc: 240, nc: 4096, fn: sgemmKernel12x32AVX512, strided: sgemmKernel12x32AVX512Strided, runs: sgemmKernel12x32AVX512Runs, rowsMR: 8, rows: sgemmKernel8x32AVX512Strided, fnPF: sgemmKernel12x32AVX512PF, stridedPF: sgemmKernel12x32AVX512StridedPF, stridedTA: sgemmKernel12x32AVX512StridedPFTA, rowsPF: sgemmKernel8x32AVX512StridedPF, runsTA: sgemmKernel12x32AVX512RunsTA, packMin: 16, parallelMin: parallelWork}
}

func avx512Kernel64() kernel[float64] {
	// B micro-panel 192*16*8 = 24 KiB, A block 240*192*8 = 360 KiB,
	// B block 192*2048*8 = 3 MiB.
	return kernel[float64]{name: "avx512", mr: 12, nr: 16, kc: 192, mc: 240, nc: 2048, fn: dgemmKernel12x16AVX512, strided: dgemmKernel12x16AVX512Strided, packMin: 16, parallelMin: parallelWork}
}

func hasAVX2() bool   { return cpu.X86.HasAVX2 && cpu.X86.HasFMA }
func hasAVX512() bool { return cpu.X86.HasAVX512F }

func kernel32() kernel[float32] {
	switch {
	case hasAVX512():
		return avx512Kernel32()
	case hasAVX2():
		return avx2Kernel32()
	}
	return genericKernel32()
}

func kernel64() kernel[float64] {
	switch {
	case hasAVX512():
		return avx512Kernel64()
	case hasAVX2():
		return avx2Kernel64()
	}
	return genericKernel64()
}

// kernels32 lists every float32 kernel usable on this machine, for tests.
func kernels32() []kernel[float32] {
	ks := []kernel[float32]{genericKernel32()}
	if hasAVX2() {
		ks = append(ks, avx2Kernel32())
	}
	if hasAVX512() {
		ks = append(ks, avx512Kernel32())
	}
	return ks
}

// kernels64 lists every float64 kernel usable on this machine, for tests.
func kernels64() []kernel[float64] {
	ks := []kernel[float64]{genericKernel64()}
	if hasAVX2() {
		ks = append(ks, avx2Kernel64())
	}
	if hasAVX512() {
		ks = append(ks, avx512Kernel64())
	}
	return ks
}
