package data

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dpmf-go/dpmf/dpcore"
)

func TestDealOwners(t *testing.T) {
	const n, users = 60000, 6000
	a, err := DealOwners(n, users, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := DealOwners(n, users, 1, 1)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed dealt differently")
	}
	c, _ := DealOwners(n, users, 1, 2)
	if slices.Equal(a, c) {
		t.Fatal("another seed dealt the same")
	}
	d := &Dataset{Y: make([]int, n), Owners: a}
	us, err := d.Users()
	if err != nil {
		t.Fatal(err)
	}
	if us.Len() != users {
		t.Fatalf("%d users, want %d", us.Len(), users)
	}
	counts := make([]int, users)
	seen := make([]bool, n)
	for k := range users {
		ex := us.Of(k)
		counts[k] = len(ex)
		for j, i := range ex {
			if seen[i] || a[i] != us.ID[k] || j > 0 && ex[j-1] >= i {
				t.Fatalf("user %d: example %d repeated, misowned or out of order", k, i)
			}
			seen[i] = true
		}
	}
	slices.Sort(counts)
	// The documented spread (data.DealOwners): at least one each, skewed.
	if counts[0] < 1 || counts[users/2] != 7 || counts[users-1] != 213 || us.MaxExamples() != 213 {
		t.Errorf("counts min %d median %d max %d, want >= 1, 7, 213", counts[0], counts[users/2], counts[users-1])
	}
	eq, _ := DealOwners(100, 10, 0, 3)
	d = &Dataset{Y: make([]int, 100), Owners: eq}
	us, _ = d.Users()
	for k := range us.Len() {
		if len(us.Of(k)) != 10 {
			t.Fatalf("skew 0: user %d has %d examples, want 10", k, len(us.Of(k)))
		}
	}
	for _, bad := range [][3]float64{{10, 0, 1}, {10, 11, 1}, {10, 5, -1}, {10, 5, 11}} {
		if _, err := DealOwners(int(bad[0]), int(bad[1]), bad[2], 1); !errors.Is(err, dpcore.ErrInvalid) {
			t.Errorf("DealOwners%v: %v, want dpcore.ErrInvalid", bad, err)
		}
	}
}

func TestOwnersAttachAndSubset(t *testing.T) {
	d, err := NewDataset(make([]float32, 4), []int{0, 1, 0, 1}, Shape{C: 1, H: 1, W: 1}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Users(); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("users of a dataset without owners: %v", err)
	}
	if err := d.SetOwners([]int64{5, 5}); !errors.Is(err, dpcore.ErrInvalid) {
		t.Fatalf("2 owners for 4 examples: %v", err)
	}
	if err := d.SetOwners([]int64{9, -3, 9, 7}); err != nil {
		t.Fatal(err)
	}
	us, err := d.Users()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(us.ID, []int64{9, -3, 7}) || !slices.Equal(us.Of(0), []int{0, 2}) || us.MaxExamples() != 2 {
		t.Fatalf("users %+v", us)
	}
	s, err := d.Subset([]int{3, 0})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Owners, []int64{7, 9}) {
		t.Fatalf("subset owners %v, want [7 9]", s.Owners)
	}
}

func TestReadCSVUserColumn(t *testing.T) {
	in := "who,x,cat,y\nann,1,a,0\nbob,2,b,1\nann,3,a,1\n cy ,4,b,0\n"
	tb, err := ReadCSV(strings.NewReader(in), TabularSpec{Label: "y", Categorical: []string{"cat"}, User: "who"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(tb.Owners, []int64{0, 1, 0, 2}) || tb.Shape.C != 2 || !slices.Equal(tb.Numeric, []string{"x"}) {
		t.Fatalf("owners %v, %d features %v: want [0 1 0 2], the user column not a feature", tb.Owners, tb.Shape.C, tb.Numeric)
	}
	for _, c := range []struct{ in, user, want string }{
		{"who,x,y\nann,1,0\n,2,1\n", "who", "empty user id"},
		{"who,x,y\nann,1,0\n", "nobody", "not in the header"},
		{"who,x,y\nann,1,0\n", "y", "two roles"},
	} {
		_, err := ReadCSV(strings.NewReader(c.in), TabularSpec{Label: "y", User: c.user}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("user %q: %v, want %q", c.user, err, c.want)
		}
	}
}
