//go:build amd64 && !purego

#include "textflag.h"

// Constants of expf (Cephes): the clamp, log2(e), ln 2 split in two, the
// degree-5 polynomial of exp(r) - 1 - r over r^2, 1, 127.
DATA expc<>+0x00(SB)/4, $0xc2ae0000 // lo = -87.0
DATA expc<>+0x04(SB)/4, $0x3fb8aa3b // log2e = 1.4426950408889634
DATA expc<>+0x08(SB)/4, $0x3f318000 // ln2hi = 0.693359375
DATA expc<>+0x0c(SB)/4, $0xb95e8083 // ln2lo = -0.00021219444
DATA expc<>+0x10(SB)/4, $0x39506967 // p5 = 0.000198756915
DATA expc<>+0x14(SB)/4, $0x3ab743ce // p4 = 0.0013981999507
DATA expc<>+0x18(SB)/4, $0x3c088908 // p3 = 0.0083334519073
DATA expc<>+0x1c(SB)/4, $0x3d2aa9c1 // p2 = 0.041665795894
DATA expc<>+0x20(SB)/4, $0x3e2aaaaa // p1 = 0.16666665459
DATA expc<>+0x24(SB)/4, $0x3f000000 // p0 = 0.50000001201
DATA expc<>+0x28(SB)/4, $0x3f800000 // one = 1.0
DATA expc<>+0x2c(SB)/4, $127 // the exponent bias
GLOBL expc<>(SB), RODATA|NOPTR, $48

// func expShiftAVX2(z, dst *float32, sh float32, n int) float64
// dst[j] = exp(z[j] - sh) in float32 for j < n (n a positive multiple of
// 8), 0 where z[j] - sh < -87 (so that no result is subnormal), NaN
// where it is NaN; returns the sum of the dst[j] in float64 (four partial
// sums in each of two registers).
TEXT ·expShiftAVX2(SB), NOSPLIT, $0-40
	MOVQ z+0(FP), SI
	MOVQ dst+8(FP), DI
	VBROADCASTSS sh+16(FP), Y15
	MOVQ n+24(FP), CX
	VBROADCASTSS expc<>+0(SB), Y14
	VBROADCASTSS expc<>+4(SB), Y13
	VBROADCASTSS expc<>+8(SB), Y12
	VBROADCASTSS expc<>+12(SB), Y11
	VPBROADCASTD expc<>+44(SB), Y10
	VXORPD Y8, Y8, Y8
	VXORPD Y9, Y9, Y9
loop:
	VMOVUPS (SI), Y0
	VSUBPS Y15, Y0, Y0
	VCMPPS $1, Y14, Y0, Y7
	VMAXPS Y0, Y14, Y0
	VMULPS Y13, Y0, Y1
	VROUNDPS $0, Y1, Y1
	VMOVAPS Y0, Y2
	VFNMADD231PS Y12, Y1, Y2
	VFNMADD231PS Y11, Y1, Y2
	VBROADCASTSS expc<>+16(SB), Y3
	VBROADCASTSS expc<>+20(SB), Y4
	VFMADD213PS Y4, Y2, Y3
	VBROADCASTSS expc<>+24(SB), Y4
	VFMADD213PS Y4, Y2, Y3
	VBROADCASTSS expc<>+28(SB), Y4
	VFMADD213PS Y4, Y2, Y3
	VBROADCASTSS expc<>+32(SB), Y4
	VFMADD213PS Y4, Y2, Y3
	VBROADCASTSS expc<>+36(SB), Y4
	VFMADD213PS Y4, Y2, Y3
	VMULPS Y2, Y2, Y5
	VFMADD213PS Y2, Y5, Y3
	VBROADCASTSS expc<>+40(SB), Y4
	VADDPS Y4, Y3, Y3
	VCVTPS2DQ Y1, Y1
	VPADDD Y10, Y1, Y1
	VPSLLD $23, Y1, Y1
	VMULPS Y1, Y3, Y3
	VANDNPS Y3, Y7, Y3
	VMOVUPS Y3, (DI)
	VCVTPS2PD X3, Y4
	VEXTRACTF128 $1, Y3, X5
	VCVTPS2PD X5, Y5
	VADDPD Y4, Y8, Y8
	VADDPD Y5, Y9, Y9
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ loop
	VADDPD Y9, Y8, Y8
	VEXTRACTF128 $1, Y8, X9
	VADDPD X9, X8, X8
	VHADDPD X8, X8, X8
	VZEROUPPER
	MOVSD X8, ret+32(FP)
	RET

// func maxAVX2(v *float32, n int) float32
// The largest of v[j], j < n (n a positive multiple of 8); NaN entries
// may be skipped (a caller's exp of v[j] - max is NaN for them anyway).
TEXT ·maxAVX2(SB), NOSPLIT, $0-20
	MOVQ v+0(FP), SI
	MOVQ n+8(FP), CX
	VMOVUPS (SI), Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JZ done
mloop:
	VMAXPS (SI), Y0, Y0
	ADDQ $32, SI
	SUBQ $8, CX
	JNZ mloop
done:
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func scaleAVX2(v *float32, a float32, n int)
// v[j] *= a for j < n (n a positive multiple of 8).
TEXT ·scaleAVX2(SB), NOSPLIT, $0-24
	MOVQ v+0(FP), DI
	VBROADCASTSS a+8(FP), Y1
	MOVQ n+16(FP), CX
sloop:
	VMULPS (DI), Y1, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ sloop
	VZEROUPPER
	RET

// Constants of the GELU's derivative: 1/2, 1, sqrt(2/pi), 3 x 0.044715.
DATA geluc<>+0x00(SB)/4, $0x3f000000
DATA geluc<>+0x04(SB)/4, $0x3f800000
DATA geluc<>+0x08(SB)/4, $0x3f4c422a
DATA geluc<>+0x0c(SB)/4, $0x3e095d4f
GLOBL geluc<>(SB), RODATA|NOPTR, $16

// func geluGradAVX2(z, th, dy *float32, n int)
// dy[j] *= (1 + t)/2 + x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2)/2 for
// x = z[j], t = th[j], j < n (n a positive multiple of 8), in float32.
TEXT ·geluGradAVX2(SB), NOSPLIT, $0-32
	MOVQ z+0(FP), SI
	MOVQ th+8(FP), DX
	MOVQ dy+16(FP), DI
	MOVQ n+24(FP), CX
	VBROADCASTSS geluc<>+0(SB), Y15
	VBROADCASTSS geluc<>+4(SB), Y14
	VBROADCASTSS geluc<>+8(SB), Y13
	VBROADCASTSS geluc<>+12(SB), Y12
gloop:
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y1
	VMULPS Y0, Y0, Y3
	VFMADD213PS Y14, Y12, Y3
	VMOVAPS Y14, Y4
	VFNMADD231PS Y1, Y1, Y4
	VMULPS Y3, Y4, Y4
	VMULPS Y0, Y4, Y4
	VMULPS Y13, Y4, Y4
	VADDPS Y14, Y1, Y5
	VADDPS Y5, Y4, Y4
	VMULPS Y15, Y4, Y4
	VMULPS (DI), Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	SUBQ $8, CX
	JNZ gloop
	VZEROUPPER
	RET
