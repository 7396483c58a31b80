package main

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/dpmf-go/dpmf/internal/authtoken"
)

// principal is who made a request: the operator, a contributor bound to
// its id, or the public (no credential).
type principal struct {
	role authtoken.Role // "" for the public
	id   string         // the contributor id of a contributor
	// local marks the operator of the zero-configuration default: any
	// caller of a loopback server without -auth-key, unauthenticated.
	local bool
}

func (p principal) operator() bool { return p.role == authtoken.Operator }

// access decides who a request comes from. Without a key (the loopback
// zero-configuration default) every caller is the operator, as before
// credentials existed; with one, a request is public unless it carries a
// valid bearer token.
type access struct {
	key     *authtoken.Key
	now     func() time.Time
	limiter *limiter // nil: no rate limit
}

// identify returns the request's principal, or a 401 for a credential
// that does not verify (forged, altered, expired, another scheme), or a
// 429 when a contributor is over its rate. Errors never quote the
// credential.
func (a *access) identify(r *http.Request) (principal, error) {
	if a.key == nil {
		return principal{role: authtoken.Operator, local: true}, nil
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, nil
	}
	scheme, tok, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return principal{}, unauthorized("the Authorization header must be \"Bearer TOKEN\"")
	}
	c, err := a.key.Verify(strings.TrimSpace(tok), a.now())
	switch {
	case errors.Is(err, authtoken.ErrExpired):
		return principal{}, unauthorized("credential expired: ask the operator for a new token")
	case err != nil:
		return principal{}, unauthorized("invalid credential")
	}
	p := principal{role: c.Role, id: c.Subject}
	if p.role == authtoken.Contributor && a.limiter != nil {
		if ok, wait := a.limiter.allow(p.id, a.now()); !ok {
			return p, tooMany(wait)
		}
	}
	return p, nil
}

// require answers 401 to the public and 403 to a principal of another
// role.
func require(p principal, role authtoken.Role, what string) error {
	switch {
	case p.role == role:
		return nil
	case p.role == "":
		return unauthorized(what + " needs " + article(role) + " credential (Authorization: Bearer TOKEN)")
	}
	return httpError{status: http.StatusForbidden, msg: what + " is not allowed to " + article(p.role) + " credential"}
}

// article is "a contributor" or "an operator".
func article(r authtoken.Role) string {
	if r == authtoken.Operator {
		return "an " + string(r)
	}
	return "a " + string(r)
}

func unauthorized(msg string) error { return httpError{status: http.StatusUnauthorized, msg: msg} }

func tooMany(wait time.Duration) error {
	return httpError{status: http.StatusTooManyRequests, msg: "rate limit of this contributor exceeded: retry later",
		retryAfter: int(math.Ceil(wait.Seconds()))}
}

// limiter is a token bucket per contributor id: rate requests a second,
// bursts of up to burst. Buckets that have refilled are forgotten, so the
// memory is bounded by the contributors active in the last burst/rate
// seconds.
type limiter struct {
	rate, burst float64
	mu          sync.Mutex
	buckets     map[string]*bucket
	lastSweep   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst int) *limiter {
	return &limiter{rate: rate, burst: float64(burst), buckets: map[string]*bucket{}}
}

// allow takes a token of id's bucket at now, or says how long until one is
// there.
func (l *limiter) allow(id string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	full := time.Duration(l.burst / l.rate * float64(time.Second))
	if len(l.buckets) > 1024 && now.Sub(l.lastSweep) > full {
		for k, b := range l.buckets {
			if now.Sub(b.last) >= full {
				delete(l.buckets, k)
			}
		}
		l.lastSweep = now
	}
	b, ok := l.buckets[id]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[id] = b
	}
	b.tokens = min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens < 1 {
		return false, time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	}
	b.tokens--
	return true, 0
}
