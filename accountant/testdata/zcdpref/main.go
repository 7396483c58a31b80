// Command zcdpref writes zcdp.csv, the reference optima of the zCDP
// conversion (Canonne, Kamath & Steinke 2020, Prop. 12, with the
// Bretagnolle-Huber bound at order 1) in 256-bit floating point, for
// TestZCDPOptimum. Run from the accountant directory:
//
//	go run ./testdata/zcdpref > testdata/zcdp.csv
//
// It uses math/big only: exp by argument halving and a Taylor series, log
// by Newton's method on exp. Each optimum is the root of the bound's
// derivative in the order (found by bisection to 2^-200), and is checked
// against a scan of 400 orders from 1 + 1e-9 to 1 + 1e9: no order of the
// scan may do better. Rows with delta below 1e-15 are left out.
package main

import (
	"fmt"
	"math"
	"math/big"
	"os"
)

const prec = 256

func nf(x float64) *big.Float        { return new(big.Float).SetPrec(prec).SetFloat64(x) }
func z() *big.Float                  { return new(big.Float).SetPrec(prec) }
func add(a, b *big.Float) *big.Float { return z().Add(a, b) }
func sub(a, b *big.Float) *big.Float { return z().Sub(a, b) }
func mul(a, b *big.Float) *big.Float { return z().Mul(a, b) }
func quo(a, b *big.Float) *big.Float { return z().Quo(a, b) }

// bexp returns e^x: x/2^k with |x/2^k| < 2^-20, Taylor to 2^-300, then k squarings.
func bexp(x *big.Float) *big.Float {
	k := 0
	r := z().Set(x)
	for r.MantExp(nil) > -20 && r.Sign() != 0 {
		r.SetMantExp(r, -1)
		k++
	}
	sum, term := nf(1), nf(1)
	for n := 1; n < 200; n++ {
		term = quo(mul(term, r), nf(float64(n)))
		sum = add(sum, term)
		if term.Sign() == 0 || term.MantExp(nil)-sum.MantExp(nil) < -prec-8 {
			break
		}
	}
	for ; k > 0; k-- {
		sum = mul(sum, sum)
	}
	return sum
}

// blog returns log x for x > 0 by Newton's method from the float64 log.
func blog(x *big.Float) *big.Float {
	m := z()
	e := x.MantExp(m) // x = m 2^e, m in [0.5, 1)
	mf, _ := m.Float64()
	y := nf(math.Log(mf))
	for i := 0; i < 8; i++ { // y += 2 (m - e^y)/(m + e^y): cubic convergence
		ey := bexp(y)
		y = add(y, quo(mul(nf(2), sub(m, ey)), add(m, ey)))
	}
	return add(y, mul(nf(float64(e)), ln2))
}

var ln2 = func() *big.Float {
	// log 2 = 2 atanh(1/3) = 2 sum 1/((2k+1) 3^(2k+1))
	s, p := z(), quo(nf(1), nf(3))
	nine := nf(9)
	for k := 0; k < 400; k++ {
		s = add(s, quo(p, nf(float64(2*k+1))))
		p = quo(p, nine)
	}
	return mul(nf(2), s)
}()

func log1p(u *big.Float) *big.Float { return blog(add(nf(1), u)) }

// g is the log delta of the order-(1+u) bound at eps; dg its derivative.
func g(rho, eps, u *big.Float) *big.Float {
	t := mul(u, sub(mul(add(nf(1), u), rho), eps))
	t = add(t, mul(u, sub(blog(u), log1p(u))))
	return sub(t, log1p(u))
}
func dg(rho, eps, u *big.Float) *big.Float {
	t := sub(mul(add(nf(1), mul(nf(2), u)), rho), eps)
	return add(t, sub(blog(u), log1p(u)))
}

// e is the eps of the order-(1+u) bound at delta; de has its derivative's sign.
func e(rho, ld, u *big.Float) *big.Float {
	t := add(mul(add(nf(1), u), rho), sub(blog(u), log1p(u)))
	return sub(t, quo(add(ld, log1p(u)), u))
}
func de(rho, ld, u *big.Float) *big.Float {
	return add(add(mul(rho, mul(u, u)), log1p(u)), ld)
}

// root bisects the increasing f on u > 0.
func root(f func(*big.Float) *big.Float) *big.Float {
	lo, hi := nf(1), nf(1)
	for f(lo).Sign() > 0 {
		lo = quo(lo, nf(2))
	}
	for f(hi).Sign() < 0 {
		hi = mul(hi, nf(2))
	}
	for i := 0; i < 230; i++ {
		mid := quo(add(lo, hi), nf(2))
		if f(mid).Sign() < 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return quo(add(lo, hi), nf(2))
}

// scanned fails if an order of the scan beats the optimum value best.
func scanned(best *big.Float, f func(*big.Float) *big.Float, what string) {
	for i := 0; i <= 400; i++ {
		u := nf(math.Pow(10, -9+18*float64(i)/400))
		if v := f(u); v.Cmp(best) < 0 {
			fmt.Fprintf(os.Stderr, "%s: order 1+%g beats the root\n", what, u)
			os.Exit(1)
		}
	}
}

func main() {
	sigmas := []float64{0.25, 0.5, 1, 2, 4, 8, 15, 30, 100}
	epss := []float64{0.01, 0.1, 0.5, 1, 2, 4, 8, 16}
	deltas := []float64{1e-12, 1e-10, 1e-8, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.05, 0.1, 0.2, 0.3, 0.5}
	fmt.Println("# kind,rho,x,optimum: delta = the optimum of ZCDPDelta(rho, x); eps = the optimum of ZCDPEpsilon(rho, x). 256-bit, from testdata/zcdpref")
	for _, s := range sigmas {
		rf := 1 / (2 * s * s)
		rho := nf(rf)
		bh := z().Sqrt(sub(nf(1), bexp(z().Neg(rho)))) // sqrt(1 - e^-rho)
		for _, x := range epss {
			eps := nf(x)
			u := root(func(u *big.Float) *big.Float { return dg(rho, eps, u) })
			best := g(rho, eps, u)
			scanned(best, func(u *big.Float) *big.Float { return g(rho, eps, u) }, fmt.Sprintf("delta rho %g eps %g", rf, x))
			d := bexp(best)
			if d.Cmp(bh) > 0 {
				d = bh
			}
			if d.Cmp(nf(1)) > 0 {
				d = nf(1)
			}
			if d.Cmp(nf(1e-15)) < 0 {
				continue // beyond the range the accountant is used in
			}
			fmt.Printf("delta,%.17g,%.17g,%s\n", rf, x, d.Text('g', 25))
		}
		for _, x := range deltas {
			ld := blog(nf(x))
			dd := mul(nf(x), nf(x))
			if dd.Cmp(sub(nf(1), bexp(z().Neg(rho)))) >= 0 {
				fmt.Printf("eps,%.17g,%.17g,0\n", rf, x)
				continue
			}
			u := root(func(u *big.Float) *big.Float { return de(rho, ld, u) })
			best := e(rho, ld, u)
			scanned(best, func(u *big.Float) *big.Float { return e(rho, ld, u) }, fmt.Sprintf("eps rho %g delta %g", rf, x))
			if best.Sign() < 0 {
				best = z()
			}
			fmt.Printf("eps,%.17g,%.17g,%s\n", rf, x, best.Text('g', 25))
		}
	}
}
