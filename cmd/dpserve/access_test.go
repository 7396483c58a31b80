package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dpmf-go/dpmf/internal/authtoken"
)

// writeKey writes a fresh token key and returns its path and the key.
func writeKey(t *testing.T) (string, authtoken.Key) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "auth.key")
	if err := authtoken.WriteKeyFile(path); err != nil {
		t.Fatal(err)
	}
	k, err := authtoken.LoadKey(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, k
}

func mint(t *testing.T, k authtoken.Key, role authtoken.Role, id string, ttl time.Duration) string {
	t.Helper()
	tok, err := k.Mint(authtoken.Claims{Role: role, Subject: id, Expires: time.Now().Add(ttl).Unix()})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// doAs sends a request with a bearer token (none if tok is empty) and
// returns the status, the decoded JSON object and the raw body.
func doAs(t *testing.T, tok, method, url, body string) (int, map[string]any, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: answer is not JSON: %q", method, url, raw)
	}
	return resp.StatusCode, m, resp.Header, string(raw)
}

// TestAccessControl checks the two roles under -auth-key (issue 24): a
// contributor cannot submit under another id (nor spend its
// participations), cannot commit and cannot read the operator's fields or
// configuration; the public can only read releases, the public ledger and
// health; the operator commits but does not contribute; expired, forged,
// altered and non-bearer credentials are refused with 401 and a JSON
// error that never quotes them. Before the roles existed every one of
// these requests succeeded.
func TestAccessControl(t *testing.T) {
	keyFile, key := writeKey(t)
	_, otherKey := writeKey(t)
	srv := startHandler(t, "-dim", "3", "-horizon", "4", "-k", "2", "-b", "2", "-auth-key", keyFile)
	u := srv.URL
	alice := mint(t, key, authtoken.Contributor, "alice", time.Hour)
	mallory := mint(t, key, authtoken.Contributor, "mallory", time.Hour)
	op := mint(t, key, authtoken.Operator, "", time.Hour)
	expired := mint(t, key, authtoken.Contributor, "alice", -time.Second)
	forged := mint(t, otherKey, authtoken.Operator, "", time.Hour)
	altered := op[:len(op)-2] + map[bool]string{true: "AA", false: "BB"}[!strings.HasSuffix(op, "AA")]
	vec := func(id string) string { return fmt.Sprintf(`{"contributor":%q,"vector":[3,4,0]}`, id) }

	for _, c := range []struct {
		name, tok, method, path, body string
		status                        int
		errHas                        string
	}{
		{"public contributes", "", "POST", "/v1/contributions", vec("alice"), 401, "contributor credential"},
		{"public commits", "", "POST", "/v1/commit", "", 401, "operator credential"},
		{"public reads config", "", "GET", "/v1/config", "", 401, "operator credential"},
		{"expired", expired, "POST", "/v1/contributions", vec("alice"), 401, "expired"},
		{"forged", forged, "POST", "/v1/commit", "", 401, "invalid credential"},
		{"altered", altered, "POST", "/v1/commit", "", 401, "invalid credential"},
		{"expired on a public route", expired, "GET", "/v1/ledger", "", 401, "expired"},
		{"mallory as alice", mallory, "POST", "/v1/contributions", vec("alice"), 403, "another contributor id"},
		{"contributor commits", alice, "POST", "/v1/commit", "", 403, "not allowed"},
		{"contributor reads config", alice, "GET", "/v1/config", "", 403, "not allowed"},
		{"operator contributes", op, "POST", "/v1/contributions", vec("alice"), 403, "not allowed"},
		{"alice", alice, "POST", "/v1/contributions", vec("alice"), 200, ""},
		{"alice, id from the token", alice, "POST", "/v1/contributions", `{"vector":[1,0,0]}`, 409, "alice"},
		{"mallory", mallory, "POST", "/v1/contributions", `{"vector":[0.1,0,0]}`, 200, ""},
		{"public reads health", "", "GET", "/healthz", "", 200, ""},
	} {
		code, m, h, raw := doAs(t, c.tok, c.method, u+c.path, c.body)
		if code != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, code, c.status, raw)
		}
		if e, _ := m["error"].(string); c.errHas != "" && !strings.Contains(e, c.errHas) {
			t.Errorf("%s: error %q, want it to mention %q", c.name, e, c.errHas)
		}
		if code == 401 && !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s: 401 without a Bearer challenge", c.name)
		}
		for _, tok := range []string{c.tok, forged, op, alice} {
			if tok != "" && strings.Contains(raw, tok[5:]) {
				t.Errorf("%s: the answer quotes a credential", c.name)
			}
		}
		if c.name == "mallory as alice" && strings.Contains(raw, "step") {
			t.Errorf("mallory learns about alice's steps: %s", raw)
		}
	}
	// Mallory's attempt did not spend alice's participation: she joined
	// step 1 once (the 200 above), so after two commits she may join
	// step 3, and then no more (k = 2).
	for range 2 {
		if code, m, _, _ := doAs(t, op, "POST", u+"/v1/commit", ""); code != 200 {
			t.Fatalf("operator commit: %d %v", code, m)
		}
	}
	if code, m, _, _ := doAs(t, alice, "POST", u+"/v1/contributions", vec("alice")); code != 200 || m["step"] != 3.0 {
		t.Fatalf("alice at step 3: %d %v", code, m)
	}
	// Releases are public.
	if code, m, _, _ := doAs(t, "", "GET", u+"/v1/releases/1", ""); code != 200 || m["step"] != 1.0 {
		t.Errorf("public release read: %d %v", code, m)
	}
	if code, m, _, _ := doAs(t, op, "GET", u+"/v1/config", ""); code != 200 || m["dim"] != 3.0 {
		t.Errorf("operator config read: %d %v", code, m)
	}
}

// TestLedgerCounters checks that the exact contribution counters (issue
// 24: contributions_clipped reveals whether a vector's norm exceeded the
// clip norm; the accepted count makes a private count pointless) reach
// the operator only: not the public, not a contributor. The vector [3,4,0]
// is clipped (norm 5 > 1), so before the fix the public ledger said
// "contributions_clipped": 1, and so did the zero-configuration one.
func TestLedgerCounters(t *testing.T) {
	keyFile, key := writeKey(t)
	srv := startHandler(t, "-dim", "3", "-horizon", "4", "-count", "-auth-key", keyFile)
	alice := mint(t, key, authtoken.Contributor, "alice", time.Hour)
	op := mint(t, key, authtoken.Operator, "", time.Hour)
	if code, m, _, _ := doAs(t, alice, "POST", srv.URL+"/v1/contributions", `{"vector":[3,4,0]}`); code != 200 {
		t.Fatalf("contribution: %d %v", code, m)
	}
	for _, c := range []struct {
		who, tok string
		see      bool
	}{{"public", "", false}, {"contributor", alice, false}, {"operator", op, true}} {
		code, l, _, raw := doAs(t, c.tok, "GET", srv.URL+"/v1/ledger", "")
		if code != 200 {
			t.Fatalf("%s ledger: %d %s", c.who, code, raw)
		}
		for _, k := range operatorOnly {
			if _, ok := l[k]; ok != c.see {
				t.Errorf("%s ledger: %q present %v, want %v", c.who, k, ok, c.see)
			}
		}
		if !c.see && strings.Contains(raw, "contributions_clipped\":") {
			t.Errorf("%s ledger: %s", c.who, raw)
		}
		if _, ok := l["epsilon_spent"]; !ok {
			t.Errorf("%s ledger lacks epsilon_spent", c.who)
		}
		if c.see && l["contributions_clipped"] != 1.0 {
			t.Errorf("operator ledger: clipped %v, want 1", l["contributions_clipped"])
		}
	}
	// Without -auth-key (loopback, zero configuration) every caller is the
	// operator, as before: the participation counters stay where scripts
	// read them, but the clipped counter, which depends on the private
	// vectors, never goes out unauthenticated.
	plain := startHandler(t, "-dim", "3", "-horizon", "4")
	do(t, "POST", plain.URL+"/v1/contributions", `{"contributor":"a","vector":[3,4,0]}`)
	_, l := do(t, "GET", plain.URL+"/v1/ledger", "")
	if _, ok := l["contributions_clipped"]; ok || l["contributions_accepted"] != 1.0 || l["contributions_rejected"] != 0.0 {
		t.Errorf("zero-configuration ledger: %v", l)
	}
}

// TestRateLimit checks the per-contributor token bucket: with -rate 1
// -burst 2 a contributor's third request at once is refused with 429, a
// JSON error and Retry-After, while another contributor is unaffected.
func TestRateLimit(t *testing.T) {
	keyFile, key := writeKey(t)
	srv := startHandler(t, "-dim", "3", "-horizon", "4", "-auth-key", keyFile, "-rate", "1", "-burst", "2")
	a := mint(t, key, authtoken.Contributor, "a", time.Hour)
	b := mint(t, key, authtoken.Contributor, "b", time.Hour)
	var codes []int
	for range 3 {
		code, _, h, _ := doAs(t, a, "GET", srv.URL+"/v1/ledger", "")
		codes = append(codes, code)
		if code == 429 && h.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Errorf("statuses %v, want 200 200 429", codes)
	}
	if code, _, _, _ := doAs(t, b, "POST", srv.URL+"/v1/contributions", `{"vector":[1,0,0]}`); code != 200 {
		t.Errorf("another contributor: %d", code)
	}
	l := newLimiter(2, 1)
	t0 := time.Unix(0, 0)
	if ok, _ := l.allow("x", t0); !ok {
		t.Fatal("first request refused")
	}
	if ok, wait := l.allow("x", t0.Add(100*time.Millisecond)); ok || wait != 400*time.Millisecond {
		t.Errorf("second after 0.1 s: %v, wait %v; want refused, 0.4 s", ok, wait)
	}
	if ok, _ := l.allow("x", t0.Add(600*time.Millisecond)); !ok {
		t.Error("refused after the bucket refilled")
	}
}

// TestReleaseList checks GET /v1/releases (issue 28 item 13; it answered
// 404): pages of releases in step order, next_from until the last page,
// the same objects as GET /v1/releases/{t}, bad parameters refused.
func TestReleaseList(t *testing.T) {
	srv := testServerDim(t, 2, 5)
	u := srv.URL
	for range 5 {
		do(t, "POST", u+"/v1/commit", "")
	}
	var steps []float64
	next := "/v1/releases?limit=2"
	for pages := 0; next != ""; pages++ {
		code, m := do(t, "GET", u+next, "")
		if code != 200 || m["steps"] != 5.0 || pages > 3 {
			t.Fatalf("GET %s: %d %v", next, code, m)
		}
		for _, r := range m["releases"].([]any) {
			rel := r.(map[string]any)
			steps = append(steps, rel["step"].(float64))
			_, one := do(t, "GET", fmt.Sprintf("%s/v1/releases/%v", u, rel["step"]), "")
			a, _ := json.Marshal(rel)
			b, _ := json.Marshal(one)
			if !bytes.Equal(a, b) {
				t.Errorf("listed %s, single %s", a, b)
			}
		}
		next = ""
		if n, ok := m["next_from"]; ok {
			next = fmt.Sprintf("/v1/releases?from=%v&limit=2", n)
		}
	}
	if fmt.Sprint(steps) != "[1 2 3 4 5]" {
		t.Errorf("listed steps %v", steps)
	}
	if code, m := do(t, "GET", u+"/v1/releases?from=9", ""); code != 200 || len(m["releases"].([]any)) != 0 {
		t.Errorf("past the end: %d %v", code, m)
	}
	for _, q := range []string{"from=0", "limit=0", "limit=100000", "from=x", "page=2"} {
		if code, m := do(t, "GET", u+"/v1/releases?"+q, ""); code != 400 {
			t.Errorf("?%s: %d %v, want 400", q, code, m)
		}
	}
}

// TestExitStatus checks the exit status rule (issue 28 item 6): 2 and one
// line for what the user can fix (a -store in a missing directory, an
// unresolvable -addr, a store made with other flags, a corrupt store, a
// non-loopback address without TLS and credentials, a bad key or
// certificate file); 1 for internal failures. All but the first five
// exited 1 or were accepted before.
func TestExitStatus(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "s.db")
	base := func(store string) []string {
		return []string{"-store", store, "-dim", "2", "-epsilon", "1", "-delta", "1e-6", "-horizon", "4", "-clip", "1"}
	}
	runLine := func(args ...string) (int, string) {
		var stderr bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		code := run(ctx, args, io.Discard, &stderr)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		return code, lines[len(lines)-1]
	}
	// A small store made with -clip 1 (20 contributions, one release),
	// then a corrupted copy of it.
	o, err := parseFlags(base(store), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	agg, err := openAggregator(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := agg.Add(context.Background(), fmt.Sprint("u", i), []float64{1, 0}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := agg.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	agg.Close()
	b, err := os.ReadFile(store)
	if err != nil || len(b) < 9000 {
		t.Fatalf("store: %d bytes, %v", len(b), err)
	}
	for i := 5000; i < 9000; i++ {
		b[i] ^= 0xa5
	}
	corrupt := filepath.Join(dir, "corrupt.db")
	os.WriteFile(corrupt, b, 0o600)
	keyFile, _ := writeKey(t)
	loose := filepath.Join(dir, "loose.key")
	os.WriteFile(loose, bytes.Repeat([]byte("ab"), 32), 0o644)
	cert, certKey := writeCert(t)

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"store in a missing directory", append(base(filepath.Join(dir, "no", "s.db")), "-addr", "127.0.0.1:0"), "does not exist"},
		{"store is a directory", append(base(dir), "-addr", "127.0.0.1:0"), "is a directory"},
		{"unresolvable address", append(base(store), "-addr", "nothost:xx"), "-addr nothost:xx"},
		{"other flags", append(base(store), "-addr", "127.0.0.1:0", "-clip", "2"), "clip: store has 1, asked for 2"},
		{"corrupt store", append(base(corrupt), "-addr", "127.0.0.1:0"), "restore"},
		{"public address, no TLS", append(base(store), "-addr", "0.0.0.0:0", "-auth-key", keyFile), "not a loopback address"},
		{"public address, no credentials", append(base(store), "-addr", "0.0.0.0:0", "-tls-cert", cert, "-tls-key", certKey), "not a loopback address"},
		{"all interfaces", append(base(store), "-addr", ":0"), "not a loopback address"},
		{"key readable by others", append(base(store), "-addr", "127.0.0.1:0", "-auth-key", loose), "chmod 600"},
		{"missing certificate", append(base(store), "-addr", "127.0.0.1:0", "-tls-cert", filepath.Join(dir, "nope.pem"), "-tls-key", certKey), "-tls-cert"},
		{"certificate alone", append(base(store), "-addr", "127.0.0.1:0", "-tls-cert", cert), "go together"},
		{"token without key", []string{"token", "-role", "operator"}, "-key"},
		{"token without id", []string{"token", "-key", keyFile}, "-contributor ID is required"},
	} {
		code, line := runLine(c.args...)
		t.Logf("%s: exit %d: %s", c.name, code, line)
		if code != 2 || !strings.HasPrefix(line, "dpserve: ") || !strings.Contains(line, c.want) {
			t.Errorf("%s: exit %d, %q; want 2 and one line mentioning %q", c.name, code, line, c.want)
		}
		if c.name == "corrupt store" && !strings.Contains(line, corrupt) {
			t.Errorf("corrupt store: %q does not name the file", line)
		}
	}
	if got := exitStatus(fmt.Errorf("serve: %w", errors.New("accept: too many open files"))); got != 1 {
		t.Errorf("internal failure: exit %d, want 1", got)
	}
}

// writeCert writes a self-signed ECDSA certificate for 127.0.0.1 and its
// key as PEM files.
func writeCert(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dpserve test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// tlsClient trusts the certificate in certFile only, with TLS versions
// between minV and maxV.
func tlsClient(t *testing.T, certFile string, minV, maxV uint16) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(certFile)
	if err != nil || !pool.AppendCertsFromPEM(b) {
		t.Fatalf("reading %s: %v", certFile, err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: minV, MaxVersion: maxV}}}
}

// TestTLSProcess runs the real server with -tls-cert, -tls-key and
// -auth-key: HTTPS with TLS 1.2 and 1.3 works with tokens minted by
// "dpserve token", TLS 1.1 and plain HTTP are refused, and no credential
// appears in the server's output.
func TestTLSProcess(t *testing.T) {
	keyFile, _ := writeKey(t)
	cert, certKey := writeCert(t)
	mintCmd := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append([]string{"token", "-key", keyFile}, args...), &out, &errb); code != 0 {
			t.Fatalf("dpserve token %v: exit %d: %s", args, code, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	alice := mintCmd("-contributor", "alice", "-ttl", "1h")
	op := mintCmd("-role", "operator", "-ttl", "10m")
	srv := startServer(t, "-store", filepath.Join(t.TempDir(), "tls.db"), "-dim", "2", "-epsilon", "1", "-delta", "1e-6",
		"-horizon", "4", "-clip", "1", "-tls-cert", cert, "-tls-key", certKey, "-auth-key", keyFile)
	base := strings.Replace(srv.base, "http://", "https://", 1)
	send := func(c *http.Client, tok, method, path, body string) (int, error) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		c := tlsClient(t, cert, v, v)
		if code, err := send(c, alice, "POST", "/v1/contributions", `{"vector":[0.5,0.5]}`); err != nil || code != 200 && code != 409 {
			t.Errorf("TLS %x contribution: %d %v", v, code, err)
		}
	}
	c := tlsClient(t, cert, tls.VersionTLS12, tls.VersionTLS13)
	if code, err := send(c, op, "POST", "/v1/commit", ""); err != nil || code != 200 {
		t.Errorf("operator commit over TLS: %d %v", code, err)
	}
	if code, err := send(c, "dps1.forged.token", "POST", "/v1/commit", ""); err != nil || code != 401 {
		t.Errorf("forged token over TLS: %d %v", code, err)
	}
	if _, err := send(tlsClient(t, cert, tls.VersionTLS10, tls.VersionTLS11), "", "GET", "/healthz", ""); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	if resp, err := http.Get(srv.base + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP was served on the TLS port")
		}
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-srv.exited; err != nil {
		t.Fatalf("graceful shutdown: %v", err)
	}
	for _, tok := range []string{alice, op, "dps1.forged.token"} {
		if strings.Contains(srv.stderr.String(), tok[5:]) {
			t.Errorf("server output quotes a credential: %s", srv.stderr)
		}
	}
}

// TestVersion checks dpserve -version and dpserve version on the built
// binary (issue 28 item 7; before, the flag was not defined): one line
// with the module path, its version and the commit (unknown when the
// build did not stamp it, as with GOFLAGS=-buildvcs=false).
func TestVersion(t *testing.T) {
	bin, err := buildServer()
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"-version", "version"} {
		out, err := exec.Command(bin, arg).Output()
		if err != nil {
			t.Fatalf("%s: %v", arg, err)
		}
		if s := string(out); !strings.HasPrefix(s, "dpserve github.com/dpmf-go/dpmf ") || !strings.Contains(s, ", commit ") || strings.Count(s, "\n") != 1 {
			t.Errorf("%s: %q", arg, s)
		}
	}
}

// BenchmarkIdentify measures the server's per-request cost of a
// contributor token: MAC check, claims decoding, rate-limit bucket.
//
//	go test -run - -bench Identify ./cmd/dpserve
func BenchmarkIdentify(b *testing.B) {
	k, _ := authtoken.NewKey()
	tok, _ := k.Mint(authtoken.Claims{Role: authtoken.Contributor, Subject: "user-0000042", Expires: time.Now().Add(time.Hour).Unix()})
	acc := access{key: &k, now: time.Now, limiter: newLimiter(1e12, 1<<30)}
	req, _ := http.NewRequest("POST", "/v1/contributions", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	for b.Loop() {
		if _, err := acc.identify(req); err != nil {
			b.Fatal(err)
		}
	}
}
