package nn

import "math"

// TowardZero32 is v rounded to float32 toward zero: |TowardZero32(v)| <=
// |v| for every float64 v (subnormal and overflowing results included: a
// finite v beyond the float32 range gives the largest finite float32 of
// its sign). A clipped contribution scaled entry by entry with it has norm
// at most the exact scaled norm, so no rounding, not even one to a
// subnormal float32, can lift it above the clip norm.
func TowardZero32(v float64) float32 {
	r := float32(v)
	if math.Abs(float64(r)) > math.Abs(v) {
		r = math.Nextafter32(r, 0)
	}
	return r
}

// scaleDown multiplies v in place by f (0 < f < 1), each product formed in
// float64 (exact for a float32 times a float32, within 2^-53 relative
// otherwise) and rounded toward zero.
func scaleDown(f float64, v []float32) {
	for k, x := range v {
		v[k] = TowardZero32(f * float64(x))
	}
}
