//go:build amd64 && !purego

#include "textflag.h"

// func addAVX2(y, x *float32, n int)
// y[k] += x[k] for k < n, n a positive multiple of 8.
TEXT ·addAVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
addloop:
	VMOVUPS (DI), Y0
	VADDPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ addloop
	VZEROUPPER
	RET

// func addToAVX2(z, x, y *float32, n int)
// z[k] = x[k] + y[k] for k < n, n a positive multiple of 8.
TEXT ·addToAVX2(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
addtoloop:
	VMOVUPS (SI), Y0
	VADDPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JNZ addtoloop
	VZEROUPPER
	RET

// func axpyAVX2(a float32, x, y *float32, n int)
// y[k] += a*x[k] (one rounding) for k < n, n a positive multiple of 8.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	VBROADCASTSS a+0(FP), Y1
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DI
	MOVQ n+24(FP), CX
axpyloop:
	VMOVUPS (DI), Y0
	VFMADD231PS (SI), Y1, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ axpyloop
	VZEROUPPER
	RET

DATA iota8<>+0x00(SB)/4, $0
DATA iota8<>+0x04(SB)/4, $1
DATA iota8<>+0x08(SB)/4, $2
DATA iota8<>+0x0c(SB)/4, $3
DATA iota8<>+0x10(SB)/4, $4
DATA iota8<>+0x14(SB)/4, $5
DATA iota8<>+0x18(SB)/4, $6
DATA iota8<>+0x1c(SB)/4, $7
GLOBL iota8<>(SB), RODATA|NOPTR, $32

// func max4AVX2(in *float32, c, wc int, out *float32, arg *int32, base int32, ow int)
// One output row of a 2x2 max pool over HWC rows, ow > 0 pixels: for
// pixel p and ch < c (a positive multiple of 8) out[p c + ch] is the
// largest of in[2pc+ch], in[2pc+c+ch], in[2pc+wc+ch], in[2pc+wc+c+ch],
// the first on ties (and NaN kept only if first), and arg[p c + ch] its
// index in the example's input, base+2pc+offset+ch.
TEXT ·max4AVX2(SB), NOSPLIT, $0-56
	MOVQ in+0(FP), SI
	MOVQ c+8(FP), CX
	MOVQ wc+16(FP), DX
	MOVQ out+24(FP), DI
	MOVQ arg+32(FP), R8
	MOVL base+40(FP), BX
	MOVQ ow+48(FP), R11
	VMOVD BX, X8
	VPBROADCASTD X8, Y8
	VPADDD iota8<>(SB), Y8, Y8      // Y8: indices of the first tap
	MOVQ CX, AX
	SHLQ $2, AX                     // AX = 4c bytes
	SHLQ $2, DX                     // DX = 4wc bytes
	MOVQ CX, BX
	VMOVQ BX, X9
	VPBROADCASTD X9, Y9             // Y9 = c
	MOVQ DX, BX
	SHRQ $2, BX
	VMOVQ BX, X10
	VPBROADCASTD X10, Y10           // Y10 = wc
	VPADDD Y9, Y10, Y11             // Y11 = wc + c
	MOVL $8, BX
	VMOVQ BX, X12
	VPBROADCASTD X12, Y12           // Y12 = 8
	LEAQ (SI)(DX*1), R9             // row below
maxpix:
	MOVQ CX, R10
maxloop:
	VMOVUPS (SI), Y0                // m
	VMOVDQU Y8, Y1                  // a
	VMOVUPS (SI)(AX*1), Y2
	VCMPPS $0x1e, Y0, Y2, Y3        // Y2 > Y0
	VBLENDVPS Y3, Y2, Y0, Y0
	VPADDD Y8, Y9, Y4
	VBLENDVPS Y3, Y4, Y1, Y1
	VMOVUPS (R9), Y2
	VCMPPS $0x1e, Y0, Y2, Y3
	VBLENDVPS Y3, Y2, Y0, Y0
	VPADDD Y8, Y10, Y4
	VBLENDVPS Y3, Y4, Y1, Y1
	VMOVUPS (R9)(AX*1), Y2
	VCMPPS $0x1e, Y0, Y2, Y3
	VBLENDVPS Y3, Y2, Y0, Y0
	VPADDD Y8, Y11, Y4
	VBLENDVPS Y3, Y4, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVDQU Y1, (R8)
	VPADDD Y8, Y12, Y8
	ADDQ $32, SI
	ADDQ $32, R9
	ADDQ $32, DI
	ADDQ $32, R8
	SUBQ $8, R10
	JNZ maxloop
	ADDQ AX, SI                     // past the window's right taps
	ADDQ AX, R9
	VPADDD Y8, Y9, Y8
	DECQ R11
	JNZ maxpix
	VZEROUPPER
	RET

// The norm kernels (norm.go): rows of c float32 channels, channels
// [0, c4) of each (c4 a positive multiple of 4, four at a time in
// float64), rows > 0. Each computes exactly what its Go loop computes:
// products that would round differently are not fused.
//
// Their loop: AX is the channel, R8 the rows left, R9 the row stride in
// bytes, R10 c4.
#define ROWS(rows, c, c4) MOVQ rows, R8; MOVQ c, R9; SHLQ $2, R9; MOVQ c4, R10
#define NEXTCH(loop) ADDQ $4, AX; CMPQ AX, R10; JLT loop
#define NEXTROW(loop) DECQ R8; JNZ loop; VZEROUPPER; RET
// Three row pointers: SI, DI and DX.
#define PTRS3(a, b, c) MOVQ a, SI; MOVQ b, DI; MOVQ c, DX
#define NEXT3 ADDQ R9, SI; ADDQ R9, DI; ADDQ R9, DX

// func chanStatsAVX2(x *float32, rows, c, c4 int, shift, s1, s2 *float64)
// d = x - shift[ch]; s1[ch] += d; s2[ch] += d*d.
TEXT ·chanStatsAVX2(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	ROWS(rows+8(FP), c+16(FP), c4+24(FP))
	MOVQ shift+32(FP), R11
	MOVQ s1+40(FP), R12
	MOVQ s2+48(FP), R13
statsrow:
	XORQ AX, AX
statsch:
	VCVTPS2PD (SI)(AX*4), Y0
	VSUBPD (R11)(AX*8), Y0, Y0
	VADDPD (R12)(AX*8), Y0, Y1
	VMOVUPD Y1, (R12)(AX*8)
	VMULPD Y0, Y0, Y2
	VADDPD (R13)(AX*8), Y2, Y2
	VMOVUPD Y2, (R13)(AX*8)
	NEXTCH(statsch)
	ADDQ R9, SI
	NEXTROW(statsrow)

// func normApplyAVX2(in, out, xh *float32, rows, c, c4 int, mean, r *float64, gamma, beta *float32, relu int)
// h = float32((x - mean[ch]) * r[ch]); xh = h; o = gamma[ch]*h + beta[ch]
// (float32, not fused); if relu, o = max(o, 0) as Go's max (NaN kept,
// +0 for -0).
TEXT ·normApplyAVX2(SB), NOSPLIT, $0-88
	PTRS3(in+0(FP), out+8(FP), xh+16(FP))
	ROWS(rows+24(FP), c+32(FP), c4+40(FP))
	MOVQ mean+48(FP), R11
	MOVQ r+56(FP), R12
	MOVQ gamma+64(FP), R13
	MOVQ beta+72(FP), R14
	MOVQ relu+80(FP), BX
	VXORPS X7, X7, X7
applyrow:
	XORQ AX, AX
applych:
	VCVTPS2PD (SI)(AX*4), Y0
	VSUBPD (R11)(AX*8), Y0, Y0
	VMULPD (R12)(AX*8), Y0, Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS X0, (DX)(AX*4)
	VMULPS (R13)(AX*4), X0, X1
	VADDPS (R14)(AX*4), X1, X1
	TESTQ BX, BX
	JZ applystore
	VMAXPS X1, X7, X1               // 0 > o ? 0 : o (NaN and -0 kept)
	VADDPS X7, X1, X1               // -0 + 0 = +0
applystore:
	VMOVUPS X1, (DI)(AX*4)
	NEXTCH(applych)
	NEXT3
	NEXTROW(applyrow)

// func normSumsAVX2(dy, act, xh *float32, rows, c, c4 int, sa, sb *float64, relu int)
// If relu, dy = 0 where !(act > 0) (stored back); sa[ch] += dy*xh (exact
// product, so fusing does not change it); sb[ch] += dy.
TEXT ·normSumsAVX2(SB), NOSPLIT, $0-72
	PTRS3(dy+0(FP), act+8(FP), xh+16(FP))
	ROWS(rows+24(FP), c+32(FP), c4+40(FP))
	MOVQ sa+48(FP), R11
	MOVQ sb+56(FP), R12
	MOVQ relu+64(FP), BX
	VXORPS X7, X7, X7
sumsrow:
	XORQ AX, AX
sumsch:
	VMOVUPS (SI)(AX*4), X0
	TESTQ BX, BX
	JZ sumsnomask
	VMOVUPS (DI)(AX*4), X1
	VCMPPS $0x1e, X7, X1, X2        // act > 0 (false for NaN)
	VANDPS X2, X0, X0
	VMOVUPS X0, (SI)(AX*4)
sumsnomask:
	VCVTPS2PD X0, Y0
	VCVTPS2PD (DX)(AX*4), Y1
	VMOVUPD (R11)(AX*8), Y2
	VFMADD231PD Y1, Y0, Y2
	VMOVUPD Y2, (R11)(AX*8)
	VADDPD (R12)(AX*8), Y0, Y3
	VMOVUPD Y3, (R12)(AX*8)
	NEXTCH(sumsch)
	NEXT3
	NEXTROW(sumsrow)

// func normDxAVX2(dy, xh, dx *float32, rows, c, c4 int, a, b, e *float64)
// dx = float32((a[ch]*dy + b[ch]*xh) + e[ch]) in float64, not fused.
TEXT ·normDxAVX2(SB), NOSPLIT, $0-72
	PTRS3(dy+0(FP), dx+16(FP), xh+8(FP))
	ROWS(rows+24(FP), c+32(FP), c4+40(FP))
	MOVQ a+48(FP), R11
	MOVQ b+56(FP), R12
	MOVQ e+64(FP), R13
dxrow:
	XORQ AX, AX
dxch:
	VCVTPS2PD (SI)(AX*4), Y0
	VCVTPS2PD (DX)(AX*4), Y1
	VMULPD (R11)(AX*8), Y0, Y0
	VMULPD (R12)(AX*8), Y1, Y1
	VADDPD Y1, Y0, Y0
	VADDPD (R13)(AX*8), Y0, Y0
	VCVTPD2PSY Y0, X0
	VMOVUPS X0, (DI)(AX*4)
	NEXTCH(dxch)
	NEXT3
	NEXTROW(dxrow)

// func chanSumsAVX2(x *float32, rows, c, c4 int, s *float64)
// s[ch] += x (float64).
TEXT ·chanSumsAVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	ROWS(rows+8(FP), c+16(FP), c4+24(FP))
	MOVQ s+32(FP), R11
csrow:
	XORQ AX, AX
csch:
	VCVTPS2PD (SI)(AX*4), Y0
	VADDPD (R11)(AX*8), Y0, Y0
	VMOVUPD Y0, (R11)(AX*8)
	NEXTCH(csch)
	ADDQ R9, SI
	NEXTROW(csrow)

// func sumsqLanesAVX2(acc *[32]float64, v *float32, n int)
// Adds v[k]^2 (in float64, exact) to acc[k mod 32] for k < n (a positive
// multiple of 16): eight YMM accumulators, loaded from acc and stored
// back, 32 floats a step (eight chains of multiply-adds in flight), then
// a last 16 to the first four.
TEXT ·sumsqLanesAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVUPD (DI), Y0
	VMOVUPD 32(DI), Y1
	VMOVUPD 64(DI), Y2
	VMOVUPD 96(DI), Y3
	VMOVUPD 128(DI), Y4
	VMOVUPD 160(DI), Y5
	VMOVUPD 192(DI), Y6
	VMOVUPD 224(DI), Y7
	CMPQ CX, $32
	JB lanes2tail
lanes2loop:
	VCVTPS2PD (SI), Y8
	VCVTPS2PD 16(SI), Y9
	VCVTPS2PD 32(SI), Y10
	VCVTPS2PD 48(SI), Y11
	VCVTPS2PD 64(SI), Y12
	VCVTPS2PD 80(SI), Y13
	VCVTPS2PD 96(SI), Y14
	VCVTPS2PD 112(SI), Y15
	VFMADD231PD Y8, Y8, Y0
	VFMADD231PD Y9, Y9, Y1
	VFMADD231PD Y10, Y10, Y2
	VFMADD231PD Y11, Y11, Y3
	VFMADD231PD Y12, Y12, Y4
	VFMADD231PD Y13, Y13, Y5
	VFMADD231PD Y14, Y14, Y6
	VFMADD231PD Y15, Y15, Y7
	ADDQ $128, SI
	SUBQ $32, CX
	CMPQ CX, $32
	JAE lanes2loop
lanes2tail:
	TESTQ CX, CX
	JZ lanes2done
	VCVTPS2PD (SI), Y8
	VCVTPS2PD 16(SI), Y9
	VCVTPS2PD 32(SI), Y10
	VCVTPS2PD 48(SI), Y11
	VFMADD231PD Y8, Y8, Y0
	VFMADD231PD Y9, Y9, Y1
	VFMADD231PD Y10, Y10, Y2
	VFMADD231PD Y11, Y11, Y3
lanes2done:
	VMOVUPD Y0, (DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	VMOVUPD Y4, 128(DI)
	VMOVUPD Y5, 160(DI)
	VMOVUPD Y6, 192(DI)
	VMOVUPD Y7, 224(DI)
	VZEROUPPER
	RET

// func sumsqLanesAVX512(acc *[32]float64, v *float32, n int)
// sumsqLanesAVX2's sums with four ZMM accumulators: 64 floats a step,
// each accumulator taking its 8 lanes of the first 32 and then of the
// second (each partial sum still adds its terms in order), then a last
// 32 and a last 16. The conversions and multiply-adds share the two
// 512-bit ports, so this runs only about 1.1x AVX2's eight chains in
// cache (1.2x the former four; 64 lanes are no faster). Each multiply-add
// follows the load and conversion it needs, one conversion ahead: all
// eight conversions first ran 10-19% slower on vectors streamed from
// memory, this order as fast as AVX2.
TEXT ·sumsqLanesAVX512(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
	VMOVUPD (DI), Z0
	VMOVUPD 64(DI), Z1
	VMOVUPD 128(DI), Z2
	VMOVUPD 192(DI), Z3
	CMPQ CX, $64
	JB lanes5tail32
lanes5loop:
	VCVTPS2PD (SI), Z8
	VCVTPS2PD 32(SI), Z9
	VFMADD231PD Z8, Z8, Z0
	VCVTPS2PD 64(SI), Z10
	VFMADD231PD Z9, Z9, Z1
	VCVTPS2PD 96(SI), Z11
	VFMADD231PD Z10, Z10, Z2
	VCVTPS2PD 128(SI), Z12
	VFMADD231PD Z11, Z11, Z3
	VCVTPS2PD 160(SI), Z13
	VFMADD231PD Z12, Z12, Z0
	VCVTPS2PD 192(SI), Z14
	VFMADD231PD Z13, Z13, Z1
	VCVTPS2PD 224(SI), Z15
	VFMADD231PD Z14, Z14, Z2
	VFMADD231PD Z15, Z15, Z3
	ADDQ $256, SI
	SUBQ $64, CX
	CMPQ CX, $64
	JAE lanes5loop
lanes5tail32:
	CMPQ CX, $32
	JB lanes5tail16
	VCVTPS2PD (SI), Z8
	VCVTPS2PD 32(SI), Z9
	VCVTPS2PD 64(SI), Z10
	VCVTPS2PD 96(SI), Z11
	VFMADD231PD Z8, Z8, Z0
	VFMADD231PD Z9, Z9, Z1
	VFMADD231PD Z10, Z10, Z2
	VFMADD231PD Z11, Z11, Z3
	ADDQ $128, SI
	SUBQ $32, CX
lanes5tail16:
	TESTQ CX, CX
	JZ lanes5done
	VCVTPS2PD (SI), Z8
	VCVTPS2PD 32(SI), Z9
	VFMADD231PD Z8, Z8, Z0
	VFMADD231PD Z9, Z9, Z1
lanes5done:
	VMOVUPD Z0, (DI)
	VMOVUPD Z1, 64(DI)
	VMOVUPD Z2, 128(DI)
	VMOVUPD Z3, 192(DI)
	VZEROUPPER
	RET

// func allFiniteAVX2(v *float32, n int) bool
// Whether v[k] - v[k] is 0 for every k < n (a positive multiple of 16):
// the differences (NaN for an infinity or a NaN) are summed, and NaN
// stays NaN.
TEXT ·allFiniteAVX2(SB), NOSPLIT, $0-17
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
finloop:
	VMOVUPS (SI), Y2
	VMOVUPS 32(SI), Y3
	VSUBPS Y2, Y2, Y2
	VSUBPS Y3, Y3, Y3
	VADDPS Y2, Y0, Y0
	VADDPS Y3, Y1, Y1
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ finloop
	VADDPS Y1, Y0, Y0
	VCMPPS $3, Y0, Y0, Y0           // unordered: NaN lanes
	VMOVMSKPS Y0, AX
	TESTL AX, AX
	SETEQ ret+16(FP)
	VZEROUPPER
	RET

// func addScaledDownAVX2(acc, v *float32, f float32, n int)
// acc[k] += MulDown(f, v[k]) for k < n, n a positive multiple of 8: the
// product f*v[k] rounded to nearest, zeroed when its magnitude is below
// the smallest normal float32 (0x00800000), then added.
TEXT ·addScaledDownAVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ v+8(FP), SI
	VBROADCASTSS f+16(FP), Y1
	MOVQ n+24(FP), CX
	MOVL $0x7fffffff, AX
	MOVD AX, X2
	VPBROADCASTD X2, Y2
	MOVL $0x00800000, AX
	MOVD AX, X3
	VPBROADCASTD X3, Y3
asdloop:
	VMULPS (SI), Y1, Y0
	VANDPS Y2, Y0, Y4
	VPCMPGTD Y4, Y3, Y5
	VANDNPS Y0, Y5, Y0
	VADDPS (DI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ asdloop
	VZEROUPPER
	RET

// func actGradToAVX2(dst, dy, a *float32, n, relu int)
// For k < n (a positive multiple of 8): relu = 0: dst[k] = dy[k] * (1 -
// a[k]*a[k]), each operation rounded (no fused multiply-add), tanh's
// derivative; relu = 1: dst[k] = dy[k] if a[k] > 0, else 0 (NaN too).
TEXT ·actGradToAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ a+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ relu+32(FP), AX
	VXORPS Y3, Y3, Y3
	TESTQ AX, AX
	JNZ relustart
	MOVL $0x3f800000, AX
	MOVD AX, X2
	VPBROADCASTD X2, Y2
tanhloop:
	VMOVUPS (DX), Y0
	VMULPS Y0, Y0, Y0
	VSUBPS Y0, Y2, Y0
	VMULPS (SI), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JNZ tanhloop
	VZEROUPPER
	RET
relustart:
	VMOVUPS (DX), Y0
	VCMPPS $0x1e, Y3, Y0, Y1
	VANDPS (SI), Y1, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JNZ relustart
	VZEROUPPER
	RET

// The norm kernels 8 channels at a time with AVX-512 (c a multiple of 8):
// the AVX2 kernels' operations on twice the lanes, so the same values.
#define NEXTCH8(loop) ADDQ $8, AX; CMPQ AX, R10; JLT loop

// func chanStatsAVX512(x *float32, rows, c, c8 int, shift, s1, s2 *float64)
TEXT ·chanStatsAVX512(SB), NOSPLIT, $0-56
	MOVQ x+0(FP), SI
	ROWS(rows+8(FP), c+16(FP), c8+24(FP))
	MOVQ shift+32(FP), R11
	MOVQ s1+40(FP), R12
	MOVQ s2+48(FP), R13
stats8row:
	XORQ AX, AX
stats8ch:
	VCVTPS2PD (SI)(AX*4), Z0
	VSUBPD (R11)(AX*8), Z0, Z0
	VADDPD (R12)(AX*8), Z0, Z1
	VMOVUPD Z1, (R12)(AX*8)
	VMULPD Z0, Z0, Z2
	VADDPD (R13)(AX*8), Z2, Z2
	VMOVUPD Z2, (R13)(AX*8)
	NEXTCH8(stats8ch)
	ADDQ R9, SI
	NEXTROW(stats8row)

// func normApplyAVX512(in, out, xh *float32, rows, c, c8 int, mean, r *float64, gamma, beta *float32, relu int)
TEXT ·normApplyAVX512(SB), NOSPLIT, $0-88
	PTRS3(in+0(FP), out+8(FP), xh+16(FP))
	ROWS(rows+24(FP), c+32(FP), c8+40(FP))
	MOVQ mean+48(FP), R11
	MOVQ r+56(FP), R12
	MOVQ gamma+64(FP), R13
	MOVQ beta+72(FP), R14
	MOVQ relu+80(FP), BX
	VXORPS Y7, Y7, Y7
apply8row:
	XORQ AX, AX
apply8ch:
	VCVTPS2PD (SI)(AX*4), Z0
	VSUBPD (R11)(AX*8), Z0, Z0
	VMULPD (R12)(AX*8), Z0, Z0
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, (DX)(AX*4)
	VMULPS (R13)(AX*4), Y0, Y1
	VADDPS (R14)(AX*4), Y1, Y1
	TESTQ BX, BX
	JZ apply8store
	VMAXPS Y1, Y7, Y1               // 0 > o ? 0 : o (NaN and -0 kept)
	VADDPS Y7, Y1, Y1               // -0 + 0 = +0
apply8store:
	VMOVUPS Y1, (DI)(AX*4)
	NEXTCH8(apply8ch)
	NEXT3
	NEXTROW(apply8row)

// func normSumsAVX512(dy, act, xh *float32, rows, c, c8 int, sa, sb *float64, relu int)
TEXT ·normSumsAVX512(SB), NOSPLIT, $0-72
	PTRS3(dy+0(FP), act+8(FP), xh+16(FP))
	ROWS(rows+24(FP), c+32(FP), c8+40(FP))
	MOVQ sa+48(FP), R11
	MOVQ sb+56(FP), R12
	MOVQ relu+64(FP), BX
	VXORPS Y7, Y7, Y7
sums8row:
	XORQ AX, AX
sums8ch:
	VMOVUPS (SI)(AX*4), Y0
	TESTQ BX, BX
	JZ sums8nomask
	VMOVUPS (DI)(AX*4), Y1
	VCMPPS $0x1e, Y7, Y1, Y2        // act > 0 (false for NaN)
	VANDPS Y2, Y0, Y0
	VMOVUPS Y0, (SI)(AX*4)
sums8nomask:
	VCVTPS2PD Y0, Z0
	VCVTPS2PD (DX)(AX*4), Z1
	VMOVUPD (R11)(AX*8), Z2
	VFMADD231PD Z1, Z0, Z2
	VMOVUPD Z2, (R11)(AX*8)
	VADDPD (R12)(AX*8), Z0, Z3
	VMOVUPD Z3, (R12)(AX*8)
	NEXTCH8(sums8ch)
	NEXT3
	NEXTROW(sums8row)

// func normDxAVX512(dy, xh, dx *float32, rows, c, c8 int, a, b, e *float64)
TEXT ·normDxAVX512(SB), NOSPLIT, $0-72
	PTRS3(dy+0(FP), dx+16(FP), xh+8(FP))
	ROWS(rows+24(FP), c+32(FP), c8+40(FP))
	MOVQ a+48(FP), R11
	MOVQ b+56(FP), R12
	MOVQ e+64(FP), R13
dx8row:
	XORQ AX, AX
dx8ch:
	VCVTPS2PD (SI)(AX*4), Z0
	VCVTPS2PD (DX)(AX*4), Z1
	VMULPD (R11)(AX*8), Z0, Z0
	VMULPD (R12)(AX*8), Z1, Z1
	VADDPD Z1, Z0, Z0
	VADDPD (R13)(AX*8), Z0, Z0
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	NEXTCH8(dx8ch)
	NEXT3
	NEXTROW(dx8row)

// func addToAVX512(z, x, y *float32, n int)
// z[k] = x[k] + y[k] for k < n, n a positive multiple of 16.
TEXT ·addToAVX512(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
addto16loop:
	VMOVUPS (SI), Z0
	VADDPS (DX), Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, DI
	ADDQ $64, SI
	ADDQ $64, DX
	SUBQ $16, CX
	JNZ addto16loop
	VZEROUPPER
	RET

// POOLBACK sets up poolBack2AVX2 and poolBackOutAVX2 from their
// arguments base, c, wc, ow and act: Y8 the top-left taps' indices
// (base + 0..7), Y9 c, Y10 wc, Y11 wc + c, Y12 8, Y14 1.0, Y15 zero,
// CX c, AX 4c, DX ow and BX act.
#define POOLBACK(base, c, wc, ow, act) MOVQ base, BX; VMOVQ BX, X8; VPBROADCASTD X8, Y8; VPADDD iota8<>(SB), Y8, Y8; MOVQ c, CX; VMOVQ CX, X9; VPBROADCASTD X9, Y9; MOVQ wc, BX; VMOVQ BX, X10; VPBROADCASTD X10, Y10; VPADDD Y9, Y10, Y11; MOVL $8, BX; VMOVQ BX, X12; VPBROADCASTD X12, Y12; MOVL $0x3f800000, BX; VMOVQ BX, X14; VPBROADCASTD X14, Y14; VXORPS Y15, Y15, Y15; MOVQ CX, AX; SHLQ $2, AX; MOVQ ow, DX; MOVQ act, BX

// func poolBack2AVX2(dst0, dst1, a0, a1, dy *float32, arg *int32, base, c, wc, ow, act int)
// A 2x2 max pool's backward for one row of ow output pixels of c
// channels (c a positive multiple of 8, ow > 0), written as whole
// windows into two rows of the producer's map (dst0 the top, dst1 the
// bottom, 2 ow c floats each): tap t of output k gets d = 0 + dy[k] times
// the producer's activation derivative at a (act 0 Identity: d; 1 Tanh:
// d (1 - a a), each operation rounded; 2 ReLU: d if a > 0, else 0) if
// arg[k] is the tap's index in the input map (base + its offset from the
// window row pair's first float, rows wc floats apart), else 0.
//
// R8, R9: the top and bottom map rows; R10, R11: the activation rows
// (the right taps AX = 4c bytes further); SI dy, DI arg; Y8 the top-left
// taps' indices, Y4-Y6 the others'; Y0 d, Y1 arg, Y14 1.0, Y15 zero.
TEXT ·poolBack2AVX2(SB), NOSPLIT, $0-88
	MOVQ dst0+0(FP), R8
	MOVQ dst1+8(FP), R9
	MOVQ a0+16(FP), R10
	MOVQ a1+24(FP), R11
	MOVQ dy+32(FP), SI
	MOVQ arg+40(FP), DI
	POOLBACK(base+48(FP), c+56(FP), wc+64(FP), ow+72(FP), act+80(FP))
	CMPQ BX, $1
	JEQ pbtanhpix
	CMPQ BX, $2
	JEQ pbrelupix
pbidpix:
	MOVQ CX, R12
pbidblk:
	VMOVUPS (SI), Y0
	VADDPS Y15, Y0, Y0              // d = 0 + dy
	VMOVDQU (DI), Y1
	VPADDD Y8, Y9, Y4
	VPADDD Y8, Y10, Y5
	VPADDD Y8, Y11, Y6
	VMOVUPS Y0, Y3
	VPCMPEQD Y8, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R8)
	VMOVUPS Y0, Y3
	VPCMPEQD Y4, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R8)(AX*1)
	VMOVUPS Y0, Y3
	VPCMPEQD Y5, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R9)
	VMOVUPS Y0, Y3
	VPCMPEQD Y6, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R9)(AX*1)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	VPADDD Y12, Y8, Y8
	SUBQ $8, R12
	JNZ pbidblk
	ADDQ AX, R8                     // past the window's right taps
	ADDQ AX, R9
	ADDQ AX, R10
	ADDQ AX, R11
	VPADDD Y9, Y8, Y8
	DECQ DX
	JNZ pbidpix
	VZEROUPPER
	RET
pbtanhpix:
	MOVQ CX, R12
pbtanhblk:
	VMOVUPS (SI), Y0
	VADDPS Y15, Y0, Y0              // d = 0 + dy
	VMOVDQU (DI), Y1
	VPADDD Y8, Y9, Y4
	VPADDD Y8, Y10, Y5
	VPADDD Y8, Y11, Y6
	VMOVUPS (R10), Y3
	VMULPS Y3, Y3, Y3
	VSUBPS Y3, Y14, Y3
	VMULPS Y0, Y3, Y3
	VPCMPEQD Y8, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R8)
	VMOVUPS (R10)(AX*1), Y3
	VMULPS Y3, Y3, Y3
	VSUBPS Y3, Y14, Y3
	VMULPS Y0, Y3, Y3
	VPCMPEQD Y4, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R8)(AX*1)
	VMOVUPS (R11), Y3
	VMULPS Y3, Y3, Y3
	VSUBPS Y3, Y14, Y3
	VMULPS Y0, Y3, Y3
	VPCMPEQD Y5, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R9)
	VMOVUPS (R11)(AX*1), Y3
	VMULPS Y3, Y3, Y3
	VSUBPS Y3, Y14, Y3
	VMULPS Y0, Y3, Y3
	VPCMPEQD Y6, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R9)(AX*1)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	VPADDD Y12, Y8, Y8
	SUBQ $8, R12
	JNZ pbtanhblk
	ADDQ AX, R8                     // past the window's right taps
	ADDQ AX, R9
	ADDQ AX, R10
	ADDQ AX, R11
	VPADDD Y9, Y8, Y8
	DECQ DX
	JNZ pbtanhpix
	VZEROUPPER
	RET
pbrelupix:
	MOVQ CX, R12
pbrelublk:
	VMOVUPS (SI), Y0
	VADDPS Y15, Y0, Y0              // d = 0 + dy
	VMOVDQU (DI), Y1
	VPADDD Y8, Y9, Y4
	VPADDD Y8, Y10, Y5
	VPADDD Y8, Y11, Y6
	VMOVUPS (R10), Y3
	VCMPPS $0x1e, Y15, Y3, Y3
	VANDPS Y0, Y3, Y3
	VPCMPEQD Y8, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R8)
	VMOVUPS (R10)(AX*1), Y3
	VCMPPS $0x1e, Y15, Y3, Y3
	VANDPS Y0, Y3, Y3
	VPCMPEQD Y4, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R8)(AX*1)
	VMOVUPS (R11), Y3
	VCMPPS $0x1e, Y15, Y3, Y3
	VANDPS Y0, Y3, Y3
	VPCMPEQD Y5, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R9)
	VMOVUPS (R11)(AX*1), Y3
	VCMPPS $0x1e, Y15, Y3, Y3
	VANDPS Y0, Y3, Y3
	VPCMPEQD Y6, Y1, Y2
	VANDPS Y2, Y3, Y3
	VMOVUPS Y3, (R9)(AX*1)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	VPADDD Y12, Y8, Y8
	SUBQ $8, R12
	JNZ pbrelublk
	ADDQ AX, R8                     // past the window's right taps
	ADDQ AX, R9
	ADDQ AX, R10
	ADDQ AX, R11
	VPADDD Y9, Y8, Y8
	DECQ DX
	JNZ pbrelupix
	VZEROUPPER
	RET

// func poolBackOutAVX2(dst0, dst1, o, dy *float32, arg *int32, base, c, wc, ow, act int)
// poolBack2AVX2 with the activation's derivative taken once per output
// at the window's maximum o (the pool's output row, ow*c floats), which
// is the input at arg: the same value at the tap arg selects, +0 at the
// others.
TEXT ·poolBackOutAVX2(SB), NOSPLIT, $0-80
	MOVQ dst0+0(FP), R8
	MOVQ dst1+8(FP), R9
	MOVQ o+16(FP), R10
	MOVQ dy+24(FP), SI
	MOVQ arg+32(FP), DI
	POOLBACK(base+40(FP), c+48(FP), wc+56(FP), ow+64(FP), act+72(FP))
pbopix:
	MOVQ CX, R12
pboblk:
	VMOVUPS (SI), Y0
	VADDPS Y15, Y0, Y0              // d = 0 + dy
	VMOVDQU (DI), Y1
	VPADDD Y8, Y9, Y4
	VPADDD Y8, Y10, Y5
	VPADDD Y8, Y11, Y6
	CMPQ BX, $1
	JEQ pbotanh
	CMPQ BX, $2
	JEQ pborelu
	VMOVUPS Y0, Y7                  // v = d
	JMP pbostore
pbotanh:
	VMOVUPS (R10), Y7
	VMULPS Y7, Y7, Y7
	VSUBPS Y7, Y14, Y7
	VMULPS Y0, Y7, Y7               // v = d (1 - o o)
	JMP pbostore
pborelu:
	VMOVUPS (R10), Y7
	VCMPPS $0x1e, Y15, Y7, Y7
	VANDPS Y0, Y7, Y7               // v = d where o > 0
pbostore:
	VPCMPEQD Y8, Y1, Y2
	VANDPS Y2, Y7, Y3
	VMOVUPS Y3, (R8)
	VPCMPEQD Y4, Y1, Y2
	VANDPS Y2, Y7, Y3
	VMOVUPS Y3, (R8)(AX*1)
	VPCMPEQD Y5, Y1, Y2
	VANDPS Y2, Y7, Y3
	VMOVUPS Y3, (R9)
	VPCMPEQD Y6, Y1, Y2
	VANDPS Y2, Y7, Y3
	VMOVUPS Y3, (R9)(AX*1)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, R8
	ADDQ $32, R9
	ADDQ $32, R10
	VPADDD Y12, Y8, Y8
	SUBQ $8, R12
	JNZ pboblk
	ADDQ AX, R8                     // past the window's right taps
	ADDQ AX, R9
	VPADDD Y9, Y8, Y8
	DECQ DX
	JNZ pbopix
	VZEROUPPER
	RET

// func chanSumsAVX512(x *float32, rows, c, c64 int, s *float64)
// s[ch] += x (float64) for channels [0, c64) (c64 a positive multiple
// of 64) of rows > 0 rows of c floats: each block of 64 channels keeps
// its sums in eight registers over all the rows (the rows in order, as
// chanSumsAVX2 adds them).
TEXT ·chanSumsAVX512(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ c+16(FP), R9
	SHLQ $2, R9                     // row stride in bytes
	MOVQ c64+24(FP), R10
	MOVQ s+32(FP), R11
	XORQ AX, AX                     // the block's first channel
cs512blk:
	VMOVUPD (R11)(AX*8), Z0
	VMOVUPD 64(R11)(AX*8), Z1
	VMOVUPD 128(R11)(AX*8), Z2
	VMOVUPD 192(R11)(AX*8), Z3
	VMOVUPD 256(R11)(AX*8), Z4
	VMOVUPD 320(R11)(AX*8), Z5
	VMOVUPD 384(R11)(AX*8), Z6
	VMOVUPD 448(R11)(AX*8), Z7
	LEAQ (SI)(AX*4), DI
	MOVQ R8, CX
cs512row:
	VCVTPS2PD (DI), Z8
	VCVTPS2PD 32(DI), Z9
	VCVTPS2PD 64(DI), Z10
	VCVTPS2PD 96(DI), Z11
	VCVTPS2PD 128(DI), Z12
	VCVTPS2PD 160(DI), Z13
	VCVTPS2PD 192(DI), Z14
	VCVTPS2PD 224(DI), Z15
	VADDPD Z8, Z0, Z0
	VADDPD Z9, Z1, Z1
	VADDPD Z10, Z2, Z2
	VADDPD Z11, Z3, Z3
	VADDPD Z12, Z4, Z4
	VADDPD Z13, Z5, Z5
	VADDPD Z14, Z6, Z6
	VADDPD Z15, Z7, Z7
	ADDQ R9, DI
	DECQ CX
	JNZ cs512row
	VMOVUPD Z0, (R11)(AX*8)
	VMOVUPD Z1, 64(R11)(AX*8)
	VMOVUPD Z2, 128(R11)(AX*8)
	VMOVUPD Z3, 192(R11)(AX*8)
	VMOVUPD Z4, 256(R11)(AX*8)
	VMOVUPD Z5, 320(R11)(AX*8)
	VMOVUPD Z6, 384(R11)(AX*8)
	VMOVUPD Z7, 448(R11)(AX*8)
	ADDQ $64, AX
	CMPQ AX, R10
	JLT cs512blk
	VZEROUPPER
	RET

// func widenAVX2(d *float64, v *float32, n int)
// d[k] = float64(v[k]) for k < n, n a positive multiple of 16.
TEXT ·widenAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ v+8(FP), SI
	MOVQ n+16(FP), CX
widenloop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VCVTPS2PD 32(SI), Y2
	VCVTPS2PD 48(SI), Y3
	VMOVUPD Y0, (DI)
	VMOVUPD Y1, 32(DI)
	VMOVUPD Y2, 64(DI)
	VMOVUPD Y3, 96(DI)
	ADDQ $64, SI
	ADDQ $128, DI
	SUBQ $16, CX
	JNZ widenloop
	VZEROUPPER
	RET
