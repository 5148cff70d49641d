//go:build e2e && linux

package e2e

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// tlsTo is a client of one Caddy's HTTPS port that trusts roots.
type tlsTo struct {
	c     *caddyProc
	roots *x509.CertPool
}

// handshake completes a TLS handshake for name and returns the
// certificate Caddy served.
func (s tlsTo) handshake(name string) (*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	return testkit.Handshake(ctx, s.addr(), name, s.roots)
}

// addr is the Caddy's HTTPS listener.
func (s tlsTo) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.c.httpsPort)) }

// get sends GET https://name/ and returns the status and body.
func (s tlsTo) get(name string) (int, string, error) {
	client := testkit.HTTPSClient(s.addr(), s.roots, within)
	defer client.CloseIdleConnections()
	res, err := client.Get("https://" + name + "/")
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, string(body), err
}

func fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// TestE2E_several_Caddy_instances_share_certificates is item 3 of
// "several hosts": two Caddy processes, one storage folder (Caddy's
// `storage file_system`), each following the daemon itself with its own
// connection, `tls internal` on demand. A certificate one issues is the one
// the other serves, loaded from storage, never issued again; two
// handshakes for a new name at once, one on each, issue it once (the
// storage lock); each answers from its own view of the daemon.
func TestE2E_several_Caddy_instances_share_certificates(t *testing.T) {
	h := newHost(t)
	shop := h.run(t, instance{name: "shop", labels: map[string]string{"caddy.host": "shop.test"}, publish: true})
	blog := h.run(t, instance{name: "blog", labels: map[string]string{"caddy.host": "blog.test"}, publish: true})
	storage := t.TempDir()
	globals := fmt.Sprintf("storage file_system %s\non_demand_tls {\n\tpermission dicer {\n%s\t}\n}", storage, indent(indent(h.settings())))
	sites := fmt.Sprintf(`
https:// {
	tls internal {
		on_demand
	}
	reverse_proxy {
		%s
	}
}
`, dynamic(h, "", 0))

	// The first creates the internal CA in the shared storage; the second,
	// started after, loads it (Caddy creates a CA without a storage lock,
	// so two instances must not both start on an empty storage).
	c1 := startCaddy(t, globals, sites)
	rootFile := filepath.Join(storage, "pki", "authorities", "local", "root.crt")
	eventually(t, "the internal CA's root is in the shared storage", func() bool { _, err := os.Stat(rootFile); return err == nil })
	c2 := startCaddy(t, globals, sites)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(readFile(rootFile))) {
		t.Fatalf("no certificate in %s", rootFile)
	}
	one, two := tlsTo{c1, roots}, tlsTo{c2, roots}
	obtained := func(c *caddyProc, name string) int {
		return c.count("obtaining certificate", map[string]string{"identifier": name})
	}

	// Issued by the first...
	cert1, err := one.handshake("shop.test")
	if err != nil {
		t.Fatalf("first Caddy, shop.test: %v", err)
	}
	crtFile := filepath.Join(storage, "certificates", "local", "shop.test", "shop.test.crt")
	before, err := os.Stat(crtFile)
	if err != nil {
		t.Fatalf("the certificate is not in the shared storage: %v", err)
	}
	// ... served by the second, from storage.
	cert2, err := two.handshake("shop.test")
	if err != nil {
		t.Fatalf("second Caddy, shop.test: %v", err)
	}
	if fingerprint(cert1) != fingerprint(cert2) || cert1.SerialNumber.Cmp(cert2.SerialNumber) != 0 {
		t.Errorf("the second Caddy serves another certificate: serial %s (sha256 %s), the first's %s (%s)",
			cert2.SerialNumber, fingerprint(cert2), cert1.SerialNumber, fingerprint(cert1))
	}
	if n := obtained(c1, "shop.test"); n != 1 {
		t.Errorf("the first Caddy obtained shop.test %d times, want 1", n)
	}
	if n := obtained(c2, "shop.test"); n != 0 {
		t.Errorf("the second Caddy obtained shop.test %d times, want 0 (it is in storage)", n)
	}
	if n := c2.count("loaded certificate from storage", map[string]string{"logger": "tls.handshake", "subjects": "[shop.test]"}); n != 1 {
		t.Errorf("the second Caddy logged %d loads of shop.test from storage, want 1", n)
	}
	if after, err := os.Stat(crtFile); err != nil || !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Errorf("the second Caddy rewrote %s: %v", crtFile, err)
	}

	// A new name asked of both at once is issued once: the one that takes
	// the storage lock issues it, the other finds it in storage.
	var wg sync.WaitGroup
	certs := make([]*x509.Certificate, 2)
	errs := make([]error, 2)
	for i, s := range []tlsTo{one, two} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			certs[i], errs[i] = s.handshake("blog.test")
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Caddy %d, blog.test at once: %v", i+1, err)
		}
	}
	if fingerprint(certs[0]) != fingerprint(certs[1]) {
		t.Errorf("blog.test asked of both at once: two certificates, serials %s and %s", certs[0].SerialNumber, certs[1].SerialNumber)
	}
	if n := obtained(c1, "blog.test") + obtained(c2, "blog.test"); n != 1 {
		t.Errorf("blog.test asked of both at once was obtained %d times, want 1", n)
	}

	// Each follows the daemon on its own: both serve the instances, and
	// both stop when the instance stops.
	for i, s := range []tlsTo{one, two} {
		if status, body, err := s.get("shop.test"); err != nil || status != http.StatusOK || body != hello(shop) {
			t.Errorf("Caddy %d, https://shop.test/: %d %q %v, want 200 %q", i+1, status, body, err, hello(shop))
		}
	}
	h.stop(t, shop)
	for i, s := range []tlsTo{one, two} {
		eventually(t, fmt.Sprintf("Caddy %d answers 503 for the stopped shop", i+1), func() bool {
			status, _, err := s.get("shop.test")
			return err == nil && status == http.StatusServiceUnavailable
		})
		if status, body, err := s.get("blog.test"); err != nil || status != http.StatusOK || body != hello(blog) {
			t.Errorf("Caddy %d, https://blog.test/: %d %q %v, want 200 %q", i+1, status, body, err, hello(blog))
		}
	}
}

// TestE2E_R5b_one_wake_across_two_daemons is R5 across the daemons of one
// `dynamic multi`, on two simulated Dicer hosts whose standby instances
// are really frozen and woken by a connection: a burst wakes one instance
// for the route, the first source's, and while the second host runs an
// instance, the first's instance back on standby is not woken again.
func TestE2E_R5b_one_wake_across_two_daemons(t *testing.T) {
	a := newHost(t)
	requireSim(t, a)
	b := newSimHost(t)
	sleepy := map[string]string{"app": "sleepy"}
	sbA := a.run(t, instance{name: "sb-a", labels: sleepy, publish: true, standbyAfter: time.Minute})
	a.standby(t, sbA)
	sbB := b.run(t, instance{name: "sb-b", labels: sleepy, publish: true, standbyAfter: time.Minute})
	b.standby(t, sbB)
	source := func(h dicerHost) string { return strings.TrimPrefix(dynamic(h, "app=sleepy", guestPort), "dynamic ") }
	c := startCaddy(t, "", fmt.Sprintf(`
http://sleepy.test {
	reverse_proxy {
		dynamic multi {
			%s
			%s
		}
		lb_policy round_robin
	}
}
`, source(a), source(b)))

	results := c.burst("sleepy.test", 10)
	for i, r := range results {
		if r.err != nil || r.status != http.StatusOK || r.body != hello(sbA) {
			t.Errorf("request %d of the burst: %v, want 200 %q (the first source's instance)", i+1, r, hello(sbA))
		}
	}
	if st := b.state(t, sbB); st != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
		t.Errorf("the second host's %s is %v, want still on standby", sbB, st)
	}
	if n := len(wokenEvents(b.events(t, sbB))); n != 0 {
		t.Errorf("the second host woke %s %d times, want 0", sbB, n)
	}
	if n := len(wokenEvents(a.events(t, sbA))); n != 1 {
		t.Errorf("the first host woke %s %d times, want 1", sbA, n)
	}

	// The second host now runs an instance; the first's goes back on
	// standby: requests go to the running one, and nothing is woken.
	// The two daemons' event streams are apart: no request is sent
	// before this Caddy has seen both changes, or one sent in between
	// would rightly wake sb-a (nothing else routable) or reach it frozen.
	run := b.run(t, instance{name: "run-b", labels: sleepy})
	a.standby(t, sbA)
	eventually(t, "caddy dicer explain sleepy.test: "+run+" the only target", func() bool {
		targets := explainTargets(t, c, "sleepy.test")
		return len(targets) == 1 && strings.HasPrefix(targets[0], run+" ")
	})
	for i := range 10 {
		if r := c.get("sleepy.test"); r.err != nil || r.status != http.StatusOK || r.body != hello(run) {
			t.Errorf("request %d: %v, want 200 %q", i+1, r, hello(run))
		}
	}
	if n := len(wokenEvents(a.events(t, sbA))); n != 1 {
		t.Errorf("the first host woke %s %d times in all, want 1 (not again while the second runs an instance)", sbA, n)
	}
	if st := a.state(t, sbA); st != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
		t.Errorf("%s is %v, want on standby", sbA, st)
	}
}

// explainTargets are the targets of every route `caddy dicer explain host`
// shows, in order.
func explainTargets(t *testing.T, c *caddyProc, host string) []string {
	t.Helper()
	var e struct {
		Routes []struct{ Targets []string }
	}
	out := caddyDicer(t, c, "explain", host, "--json")
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("caddy dicer explain %s --json: %v\n%s", host, err, out)
	}
	var targets []string
	for _, r := range e.Routes {
		targets = append(targets, r.Targets...)
	}
	return targets
}
