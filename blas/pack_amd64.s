//go:build amd64 && !purego

#include "textflag.h"

// func copyRowsAVX(dst, src unsafe.Pointer, stride, rows, rowBytes int)
// Copies rows rows of rowBytes bytes (64 or 128), stride bytes apart at
// src, one after the other to dst. rows >= 1.
TEXT ·copyRowsAVX(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ stride+16(FP), DX
	MOVQ rows+24(FP), CX
	MOVQ rowBytes+32(FP), AX
	CMPQ AX, $128
	JEQ rows128
rows64:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ DX, SI
	ADDQ $64, DI
	DECQ CX
	JNE rows64
	VZEROUPPER
	RET
rows128:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ DX, SI
	ADDQ $128, DI
	DECQ CX
	JNE rows128
	VZEROUPPER
	RET
