package nn

import "math"

// TowardZero32 is v rounded to float32 toward zero: |TowardZero32(v)| <=
// |v| for every float64 v (subnormal and overflowing results included: a
// finite v beyond the float32 range gives the largest finite float32 of
// its sign).
func TowardZero32(v float64) float32 {
	// Clearing the 29 low bits of the float64 significand truncates it
	// to float32's 24 bits, toward zero; when the exponent is in
	// float32's normal range (2^-126 to 2^127, biased 897 to 1150) the
	// result converts exactly. Zero converts exactly too.
	b := math.Float64bits(v) &^ (1<<29 - 1)
	if e := b >> 52 & 0x7ff; e-897 > 1150-897 && b<<1 != 0 {
		return towardZeroOutside(v)
	}
	return float32(math.Float64frombits(b))
}

// towardZeroOutside is TowardZero32 outside float32's normal range (kept
// out of line so that TowardZero32 inlines).
func towardZeroOutside(v float64) float32 {
	r := float32(v)
	if math.Abs(float64(r)) > math.Abs(v) {
		r = math.Nextafter32(r, 0)
	}
	return r
}

// Factor32 is a clip factor c in [0, 1] as the float32 that scales with
// MulDown: c rounded to nearest (within 2^-24 relative), or 0 when that
// would be subnormal (a subnormal float32 carries up to 2^-150 of absolute
// error, which no relative margin covers; the unit's gradient norm is
// then above 2^126 clip norms).
func Factor32(c float64) float32 {
	f := float32(c)
	if f < 0x1p-126 {
		return 0
	}
	return f
}

// MulDown is f*x for a factor f = Factor32(c), rounded to nearest in
// float32 and flushed to zero when the product is subnormal: |MulDown(f,
// x)| <= c|x|(1+2^-24)^2 for every float32 x. (A subnormal product has an
// absolute rounding error of up to 2^-150, which no relative margin
// covers; flushing it only shrinks the entry.) It is the scaling every
// clipped contribution is formed with.
func MulDown(f, x float32) float32 {
	p := f * x
	if math.Float32bits(p)&0x7fffffff < 0x00800000 {
		return 0
	}
	return p
}

// scaleDown multiplies v in place by c in [0, 1] with MulDown; c = 1
// leaves v as it is but for subnormal entries, which become zero.
func scaleDown(c float64, v []float32) {
	f := Factor32(c)
	for k, x := range v {
		v[k] = MulDown(f, x)
	}
}

// addScaledDownGo adds MulDown(Factor32(c), v[k]) to acc[k]: scaleDown
// and add in one pass, the same values.
func addScaledDownGo(acc, v []float32, c float64) {
	f := Factor32(c)
	acc = acc[:len(v)]
	for k, x := range v {
		acc[k] += MulDown(f, x)
	}
}
