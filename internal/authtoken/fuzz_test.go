package authtoken

import (
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary Authorization values to Verify: it must never
// panic, never accept anything but a token minted with the key (the MAC
// covers every byte of the claims), and never quote its input in an error.
func FuzzVerify(f *testing.F) {
	k, err := ParseKey([]byte(strings.Repeat("5a", 32)))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []Claims{{Role: Contributor, Subject: "alice", Expires: now.Unix() + 60}, {Role: Operator, Expires: now.Unix() + 60}} {
		tok, _ := k.Mint(c)
		f.Add(tok)
		f.Add(tok[:len(tok)-1])
	}
	f.Add("dps1..")
	f.Add("")
	f.Fuzz(func(t *testing.T, tok string) {
		c, err := k.Verify(tok, now)
		if err != nil {
			if len(tok) > 12 && strings.Contains(err.Error(), tok) {
				t.Fatalf("error quotes the input: %v", err)
			}
			return
		}
		again, err := k.Mint(c)
		if err != nil {
			t.Fatalf("verified claims %+v cannot be minted: %v", c, err)
		}
		if _, err := k.Verify(again, now); err != nil {
			t.Fatal(err)
		}
	})
}
