//go:build amd64 && !purego

#include "textflag.h"

// Constants of tanh32's Pade approximant, rounded to float32.
DATA tanhc<>+0x00(SB)/4, $0x41180000 // hi = 9.5
DATA tanhc<>+0x04(SB)/4, $0xc1180000 // lo = -9.5
DATA tanhc<>+0x08(SB)/4, $0x3f800000 // one = 1.0
DATA tanhc<>+0x0c(SB)/4, $0x3e1902f1 // p1 = 0.14942528735632185
DATA tanhc<>+0x10(SB)/4, $0x3bb8230c // p2 = 0.00561941251596424
DATA tanhc<>+0x14(SB)/4, $0x38a85a8f // p3 = 8.0277321656632e-05
DATA tanhc<>+0x18(SB)/4, $0x35047e96 // p4 = 4.935803703086729e-07
DATA tanhc<>+0x1c(SB)/4, $0x30b03350 // p5 = 1.2820269358666827e-09
DATA tanhc<>+0x20(SB)/4, $0x2ba2545b // p6 = 1.1534205450892331e-12
DATA tanhc<>+0x24(SB)/4, $0x253a3f39 // p7 = 1.6154349370997664e-16
DATA tanhc<>+0x28(SB)/4, $0x3ef72c23 // q1 = 0.4827586206896552
DATA tanhc<>+0x2c(SB)/4, $0x3d08029e // q2 = 0.033205619412515965
DATA tanhc<>+0x30(SB)/4, $0x3a4469a7 // q3 = 0.0007492550021285653
DATA tanhc<>+0x34(SB)/4, $0x36ea3b36 // q4 = 6.9806366657940875e-06
DATA tanhc<>+0x38(SB)/4, $0x32f2468e // q5 = 2.8204592589067017e-08
DATA tanhc<>+0x3c(SB)/4, $0x2e45d6cf // q6 = 4.4983401258480094e-11
DATA tanhc<>+0x40(SB)/4, $0x28ae9b46 // q7 = 1.9385219245197195e-14
GLOBL tanhc<>(SB), RODATA|NOPTR, $68

// func biasTanhAVX2(dst, z, bias *float32, n int)
// dst[j] = tanh(z[j] + bias[j]) for j < n, n a positive multiple of 8
// (dst may be z): x clamped to [-9.5, 9.5], then x P(x^2)/Q(x^2) with
// FMA Horner steps. NaN propagates (the clamps return their second
// source, x, on NaN).
TEXT ·biasTanhAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ z+8(FP), DX
	MOVQ bias+16(FP), SI
	MOVQ n+24(FP), CX
	VBROADCASTSS tanhc<>+0(SB), Y15
	VBROADCASTSS tanhc<>+4(SB), Y14
	VBROADCASTSS tanhc<>+8(SB), Y13
	VBROADCASTSS tanhc<>+36(SB), Y12
	VBROADCASTSS tanhc<>+64(SB), Y11
loop:
	VMOVUPS (DX), Y0
	VADDPS (SI), Y0, Y0
	VMINPS Y0, Y15, Y0
	VMAXPS Y0, Y14, Y0
	VMULPS Y0, Y0, Y1
	VMOVAPS Y12, Y2
	VMOVAPS Y11, Y3
	VBROADCASTSS tanhc<>+32(SB), Y4
	VFMADD213PS Y4, Y1, Y2
	VBROADCASTSS tanhc<>+60(SB), Y5
	VFMADD213PS Y5, Y1, Y3
	VBROADCASTSS tanhc<>+28(SB), Y4
	VFMADD213PS Y4, Y1, Y2
	VBROADCASTSS tanhc<>+56(SB), Y5
	VFMADD213PS Y5, Y1, Y3
	VBROADCASTSS tanhc<>+24(SB), Y4
	VFMADD213PS Y4, Y1, Y2
	VBROADCASTSS tanhc<>+52(SB), Y5
	VFMADD213PS Y5, Y1, Y3
	VBROADCASTSS tanhc<>+20(SB), Y4
	VFMADD213PS Y4, Y1, Y2
	VBROADCASTSS tanhc<>+48(SB), Y5
	VFMADD213PS Y5, Y1, Y3
	VBROADCASTSS tanhc<>+16(SB), Y4
	VFMADD213PS Y4, Y1, Y2
	VBROADCASTSS tanhc<>+44(SB), Y5
	VFMADD213PS Y5, Y1, Y3
	VBROADCASTSS tanhc<>+12(SB), Y4
	VFMADD213PS Y4, Y1, Y2
	VBROADCASTSS tanhc<>+40(SB), Y5
	VFMADD213PS Y5, Y1, Y3
	VFMADD213PS Y13, Y1, Y2
	VFMADD213PS Y13, Y1, Y3
	VMULPS Y2, Y0, Y0
	VDIVPS Y3, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ loop
	VZEROUPPER
	RET
