package accountant

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestZCDPOptimum checks ZCDPDelta and ZCDPEpsilon against the optima of
// their own bound (CKS 2020, Prop. 12 at the best Rényi order, with
// Bretagnolle-Huber at order 1) computed in 256-bit arithmetic by
// testdata/zcdpref (testdata/zcdp.csv: rho = 1/(2 sigma^2) for sigma in
// [0.25, 100], eps in [0, 16], delta in [1e-12, 0.5]). Each result must
// equal its optimum to a relative 1e-9 (absolute 1e-12 for eps): above
// it is the defect of issue 43 (a golden-section search stopped on the
// wrong branch), below it would not be a bound. The examples are
// among the rows and are also checked by name.
func TestZCDPOptimum(t *testing.T) {
	f, err := os.Open("testdata/zcdp.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Split(line, ",")
		rho, err1 := strconv.ParseFloat(fs[1], 64)
		x, err2 := strconv.ParseFloat(fs[2], 64)
		want, err3 := strconv.ParseFloat(fs[3], 64)
		if len(fs) != 4 || err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("bad fixture line %q", line)
		}
		n++
		switch fs[0] {
		case "delta":
			got, err := ZCDPDelta(rho, x)
			if err != nil || relErr(got, want) > 1e-9 {
				t.Errorf("ZCDPDelta(%g, %g) = %.12g, optimum %.12g (%v)", rho, x, got, want, err)
			}
		case "eps":
			got, err := ZCDPEpsilon(rho, x)
			if err != nil || !(abs(got-want) <= 1e-9*want+1e-12) {
				t.Errorf("ZCDPEpsilon(%g, %g) = %.12g, optimum %.12g (%v)", rho, x, got, want, err)
			}
		default:
			t.Fatalf("bad fixture kind %q", fs[0])
		}
	}
	if n < 150 {
		t.Fatalf("%d fixture rows, want the whole grid", n)
	}
	// Issue 43's examples (the 256-bit optima, rounded).
	for _, c := range []struct{ sigma, eps, want float64 }{
		{1, 0.5, 0.39988985}, {1, 1, 0.24684633}, {15, 0.1, 0.0047400545},
	} {
		if got, _ := ZCDPDelta(ZCDPRho(c.sigma), c.eps); relErr(got, c.want) > 1e-7 {
			t.Errorf("ZCDPDelta(ZCDPRho(%g), %g) = %.8g, want %.8g", c.sigma, c.eps, got, c.want)
		}
	}
	if got, _ := ZCDPEpsilon(ZCDPRho(8), 0.1); got != 0 {
		t.Errorf("ZCDPEpsilon(ZCDPRho(8), 0.1) = %v, want 0 (sqrt(1 - e^-rho) < 0.1)", got)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
