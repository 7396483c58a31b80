//go:build amd64 && !purego

#include "textflag.h"

// func copyRowsAVX2(dst, src *float32, ldb, rows, nr int)
// Copies rows > 0 rows of nr floats (16 or 32), ldb floats apart at src,
// to dst one after the other.
TEXT ·copyRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ldb+16(FP), R8
	SHLQ $2, R8
	MOVQ rows+24(FP), CX
	MOVQ nr+32(FP), DX
	CMPQ DX, $32
	JNE rows16
rows32:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ R8, SI
	ADDQ $128, DI
	DECQ CX
	JNZ rows32
	VZEROUPPER
	RET
rows16:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ R8, SI
	ADDQ $64, DI
	DECQ CX
	JNZ rows16
	VZEROUPPER
	RET
