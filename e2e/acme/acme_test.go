//go:build e2e && linux

package acme

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// challengeOf returns the challenge types Caddy's log says it solved for
// name ("trying to solve challenge" entries).
func (s *setup) challengesOf(name string) []string {
	var types []string
	for _, e := range s.logged("trying to solve challenge", "identifier", name) {
		if c, _ := e["challenge_type"].(string); c != "" {
			types = append(types, c)
		}
	}
	return types
}

// servesWithNewCertificate asserts that the first request for host makes
// one order, answers 200 with body under a certificate for host that
// Pebble issued by the challenge want, and returns the request's time.
func (s *setup) servesWithNewCertificate(host, body, want string) time.Duration {
	t := s.t
	t.Helper()
	before := orders()
	start := time.Now()
	leaf, err := handshake(host)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("%s: first handshake: %v", host, err)
	}
	if body != "" {
		status, got, _, _, err := get(host, 30*time.Second)
		if err != nil || status != http.StatusOK || got != body {
			list, _ := instancesListed()
			t.Fatalf("https://%s/: %d %q %v, want 200 %q; Caddy's instances:\n%s", host, status, got, err, body, list)
		}
	}
	if leaf == nil || leaf.VerifyHostname(host) != nil {
		t.Fatalf("https://%s/: the certificate served does not name it", host)
	}
	if n := orders() - before; n != 1 {
		t.Errorf("%s: %d orders at Pebble, want 1", host, n)
	}
	if got := s.challengesOf(host); len(got) != 1 || got[0] != want {
		t.Errorf("%s: challenges solved %q, want [%s]", host, got, want)
	}
	return took
}

func testChallenge(t *testing.T, disable, want string) {
	s := newSetup(t)
	s.startCaddy(options{disable: disable})
	web, api := s.host("web"), s.host("api")
	s.container("web", web)
	s.instance("api", "127.0.0.21", api)
	first := s.servesWithNewCertificate(web, "hello from "+s.tag+"-web\n", want)
	s.servesWithNewCertificate(api, "hello from api\n", want)
	before := orders()
	_, _, again, _, err := get(api, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := orders() - before; n != 0 {
		t.Errorf("a second request made %d orders", n)
	}
	t.Logf("MEASURE %s: first handshake for a container's host (certificate at the handshake) %s; a later request %s",
		want, first.Round(time.Millisecond), again.Round(time.Millisecond))
}

// TestACME_R7b_http01_certificates_for_claimed_hosts: with TLS-ALPN-01
// off, a host a container claims and a host a Dicer instance claims each
// get a certificate from Pebble by HTTP-01 at the first request, one order
// each, and are served by their instance.
func TestACME_R7b_http01_certificates_for_claimed_hosts(t *testing.T) {
	testChallenge(t, "tlsalpn", "http-01")
}

// TestACME_R7b_tlsalpn01_certificates_for_claimed_hosts: the same with
// HTTP-01 off, by TLS-ALPN-01.
func TestACME_R7b_tlsalpn01_certificates_for_claimed_hosts(t *testing.T) {
	testChallenge(t, "http", "tls-alpn-01")
}

// TestACME_R7_unclaimed_names_make_no_orders: 1,000 handshakes with
// random names nobody claims (some under a claimed host) all fail and
// make no order at Pebble; a claimed name afterwards makes one (the CA
// was reachable all along).
func TestACME_R7_unclaimed_names_make_no_orders(t *testing.T) {
	s := newSetup(t)
	s.startCaddy(options{})
	claimed := s.host("claimed")
	s.container("claimed", claimed)
	s.instance("dicer", "127.0.0.22", s.host("dicer"))
	before := orders()
	const n, workers = 1000, 8
	var next, ok atomic.Int32
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= n; i = next.Add(1) {
				name := randomHex(6) + ".test"
				if i%4 == 0 {
					name = randomHex(3) + "." + claimed // under a claimed name: not claimed
				}
				if _, err := handshake(name); err == nil {
					ok.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	if ok.Load() != 0 {
		t.Errorf("%d of %d handshakes for unclaimed names succeeded", ok.Load(), n)
	}
	if got := orders() - before; got != 0 {
		t.Fatalf("%d handshakes for unclaimed names made %d orders at Pebble, want 0", n, got)
	}
	t.Logf("MEASURE %d handshakes for random unclaimed names: 0 orders, %s (%s each, %d workers)",
		n, took.Round(time.Millisecond), (took / n).Round(time.Microsecond), workers)
	if _, err := handshake(claimed); err != nil {
		t.Fatalf("the claimed name afterwards: %v", err)
	}
	if got := orders() - before; got != 1 {
		t.Errorf("the claimed name made %d orders, want 1", got)
	}
}

// TestACME_R7c_lost_claim_not_renewed: Pebble issues 45-second
// certificates, so renewal is due (the last third) within the test. Two
// names get certificates; the Dicer instance claiming one is deleted.
// Once the other's renewal is due, a handshake for it renews it (a new
// order, a new serial); a handshake for the name that lost its claim makes
// no order, and Caddy stops serving its certificate.
func TestACME_R7c_lost_claim_not_renewed(t *testing.T) {
	s := newSetup(t)
	s.startCaddy(options{})
	gone, kept := s.host("gone"), s.host("kept")
	s.instance("gone", "127.0.0.23", gone)
	s.container("kept", kept)
	goneCert, err := handshake(gone)
	if err != nil {
		t.Fatal(err)
	}
	keptCert, err := handshake(kept)
	if err != nil {
		t.Fatal(err)
	}
	s.dicer.DeleteInstance("gone")
	testkit.Eventually(t, 20*time.Second, "Caddy no longer lists the deleted instance", func() bool {
		list, err := instancesListed()
		return err == nil && strings.Contains(list, "kept") && !strings.Contains(list, `"gone"`)
	})
	before := orders()
	due := keptCert.NotAfter.Add(-keptCert.NotAfter.Sub(keptCert.NotBefore) / 3)
	t.Logf("certificates valid %s; renewal due from %s", keptCert.NotAfter.Sub(keptCert.NotBefore), time.Until(due).Round(time.Second))
	testkit.Eventually(t, time.Until(keptCert.NotAfter)+30*time.Second, "the claimed name's certificate renewed at a handshake", func() bool {
		c, err := handshake(kept)
		return err == nil && c.SerialNumber.Cmp(keptCert.SerialNumber) != 0
	})
	renewed := orders()
	if got := renewed - before; got != 1 {
		t.Fatalf("renewing the claimed name made %d orders, want 1", got)
	}
	t.Logf("renewing the claimed name: %d orders", renewed-before)
	// The lost name's certificate is due too (issued first). Handshakes
	// until after it expires: none may order, and once certmagic has
	// checked the permission it stops serving the certificate.
	// Refused before it expires: certmagic asked the permission at a
	// handshake in the renewal window and dropped the certificate (after
	// its expiry any client refuses it, which would prove nothing).
	var refusedAt time.Time
	testkit.UntilEvery(time.Until(goneCert.NotAfter)+5*time.Second, time.Second, func() bool {
		if _, err := handshake(gone); err != nil && refusedAt.IsZero() {
			refusedAt = time.Now()
			t.Logf("%s refused %s before its expiry: %v", gone, goneCert.NotAfter.Sub(refusedAt).Round(time.Second), err)
		}
		return time.Now().After(goneCert.NotAfter)
	})
	// Nothing else asks for a certificate meanwhile: Pebble's count is
	// the lost name's, and is checked per name too (Pebble's validations,
	// Caddy's challenges).
	if n := orders() - renewed; n != 0 {
		t.Errorf("handshakes for the lost name made %d orders, want 0 (validations: %s %d, %s %d)",
			n, gone, validations(gone), kept, validations(kept))
	}
	if refusedAt.IsZero() || !refusedAt.Before(goneCert.NotAfter) {
		t.Errorf("%s: served until its certificate expired after its claim was lost (refused at %v, expiry %v)", gone, refusedAt, goneCert.NotAfter)
	}
	if n := len(s.challengesOf(gone)); n != 1 {
		t.Errorf("Caddy's log: %d challenges solved for %s, want 1 (its first certificate only)", n, gone)
	}
	// Pebble's own count per name: authorizations are never reused, so
	// every certificate for a name needs one validation of it.
	if n := validations(gone); n != 1 {
		t.Errorf("Pebble validated %s %d times, want 1 (its first certificate only)", gone, n)
	}
	if n := len(s.logged("certificate should not be obtained", "server_name", gone)); n == 0 {
		t.Logf("note: Caddy's log has no 'certificate should not be obtained' for %s", gone)
	}
}

// TestACME_R7b_obtain_on_claim_measured: without obtain_on_claim, the
// first request for a newly claimed host waits for the CA; with it, the
// certificate is ordered as the claim appears, before any request, and
// the first request makes no order. Both figures are logged, not asserted.
func TestACME_R7b_obtain_on_claim_measured(t *testing.T) {
	var without time.Duration
	t.Run("without", func(t *testing.T) {
		s := newSetup(t)
		s.startCaddy(options{})
		host := s.host("plain")
		s.instance("plain", "127.0.0.25", host)
		status, _, took, _, err := get(host, 90*time.Second)
		if err != nil || status != http.StatusOK {
			t.Fatalf("%s: %d %v", host, status, err)
		}
		without = took
	})
	t.Run("with", func(t *testing.T) {
		s := newSetup(t)
		s.startCaddy(options{obtainOnClaim: true})
		for _, kind := range []string{"docker", "dicer"} {
			host := s.host("pre-" + kind)
			before := orders()
			start := time.Now()
			if kind == "docker" {
				s.container("pre", host)
			} else {
				s.instance("pre", "127.0.0.24", host)
			}
			var ready time.Duration
			testkit.Eventually(t, 90*time.Second, "obtain_on_claim's certificate for "+host, func() bool {
				e := s.logged("obtain_on_claim: certificate ready for the newly claimed host", "host", host)
				if len(e) == 0 {
					return false
				}
				ts, _ := e[0]["ts"].(float64) // when Caddy logged it
				ready = time.Unix(0, int64(ts*1e9)).Sub(start)
				return true
			})
			if n := orders() - before; n != 1 {
				t.Errorf("%s: %d orders before any request, want 1; Pebble validated it %d times", host, n, validations(host))
			} else {
				t.Logf("%s: %d orders before any request; Pebble validated %s %d times, Caddy solved %d challenges for it",
					host, n, host, validations(host), len(s.challengesOf(host)))
			}
			mid := orders()
			start = time.Now()
			status, _, first, _, err := get(host, 30*time.Second)
			if err != nil || status != http.StatusOK {
				t.Fatalf("%s: %d %v", host, status, err)
			}
			if n := orders() - mid; n != 0 {
				t.Errorf("%s: the first request made %d orders, want 0 (pre-issued)", host, n)
			}
			t.Logf("MEASURE obtain_on_claim %s: claim (container started / instance created) to certificate %s; first HTTPS request %s",
				kind, ready.Round(time.Millisecond), first.Round(time.Millisecond))
		}
		t.Logf("MEASURE first HTTPS request without obtain_on_claim (certificate at the handshake): %s", without.Round(time.Millisecond))
	})
}
