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

// func max4AVX2(in *float32, c, wc int, out *float32, arg *int32, base int32)
// One output pixel of a 2x2 max pool over HWC rows: for ch < c (a positive
// multiple of 8) out[ch] is the largest of in[ch], in[c+ch], in[wc+ch],
// in[wc+c+ch], the first on ties (and NaN kept only if first), and
// arg[ch] its index in the example's input, base+offset+ch.
TEXT ·max4AVX2(SB), NOSPLIT, $0-44
	MOVQ in+0(FP), SI
	MOVQ c+8(FP), CX
	MOVQ wc+16(FP), DX
	MOVQ out+24(FP), DI
	MOVQ arg+32(FP), R8
	MOVL base+40(FP), BX
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
	SUBQ $8, CX
	JNZ maxloop
	VZEROUPPER
	RET
