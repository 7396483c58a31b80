package authtoken_test

import (
	"fmt"
	"time"

	"github.com/dpmf-go/dpmf/internal/authtoken"
)

func Example() {
	key, err := authtoken.NewKey()
	if err != nil {
		panic(err)
	}
	tok, _ := key.Mint(authtoken.Claims{Role: authtoken.Contributor, Subject: "user-42", Expires: time.Now().Add(time.Hour).Unix()})
	c, err := key.Verify(tok, time.Now())
	fmt.Println(c.Role, c.Subject, err)
	// Output: contributor user-42 <nil>
}
