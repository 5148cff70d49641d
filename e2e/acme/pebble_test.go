//go:build e2e && linux

package acme

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Pebble and pebble-challtestsrv in the namespace, on loopback:
//
//	127.0.0.1:14000  Pebble's ACME directory (/dir), HTTPS with a
//	                 certificate made here (caHTTPSRoot)
//	127.0.0.1:15000  Pebble's management API (/roots/0: the root it issues under)
//	127.0.0.1:8053   challtestsrv's DNS: every name is 127.0.0.1, where Caddy
//	                 listens on 80 (HTTP-01) and 443 (TLS-ALPN-01)
const (
	directory      = "https://127.0.0.1:14000/dir"
	managementRoot = "https://127.0.0.1:15000/roots/0"
	dnsAddr        = "127.0.0.1:8053"
	challMgmt      = "127.0.0.1:8055"
	// certValidity is the lifetime of Pebble's certificates (seconds):
	// short, so that a renewal is due within a test (certmagic renews in the
	// last third of a certificate's life).
	certValidity = 45
)

// ca is the running CA: files, log, roots.
var ca struct {
	dir        string // Pebble's files
	httpsRoot  string // PEM file of the certificate of Pebble's HTTPS listener
	log        *lockedBuffer
	logFile    string
	issueRoots *x509.CertPool // Pebble's issuing root, to verify what Caddy serves
}

// lockedBuffer is Pebble's output, read while it writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// orders is the number of new orders Pebble has taken so far (each logs
// one "POST /order-plz").
// Pebble writes its log straight to a file (an *os.File: no copying
// goroutine that could lag behind), so the count is current when a
// client's ACME call has returned.
func orders() int {
	b, _ := os.ReadFile(ca.logFile)
	return strings.Count(string(b), "POST /order-plz")
}

// validations is the number of challenge validations Pebble started for
// name (its log names the identifier of each; with authorizations never
// reused, one per order that got as far as a challenge).
func validations(name string) int {
	b, _ := os.ReadFile(ca.logFile)
	return strings.Count(string(b), `Value:"`+name+`"}`)
}

// startCA writes Pebble's config and HTTPS certificate, starts the DNS and
// Pebble, and waits for the directory and the issuing root.
func startCA() (stop func(), err error) {
	dir, err := os.MkdirTemp("", "pebble")
	if err != nil {
		return nil, err
	}
	ca.dir, ca.log = dir, new(lockedBuffer)
	var procs []*exec.Cmd
	stop = func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
		os.RemoveAll(dir)
	}
	fail := func(err error) (func(), error) { stop(); return nil, err }
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := selfSigned(certFile, keyFile); err != nil {
		return fail(err)
	}
	ca.httpsRoot = certFile
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":             "127.0.0.1:14000",
		"managementListenAddress":   "127.0.0.1:15000",
		"certificate":               certFile,
		"privateKey":                keyFile,
		"httpPort":                  80,
		"tlsPort":                   443,
		"ocspResponderURL":          "",
		"certificateValidityPeriod": certValidity,
	}}
	raw, _ := json.Marshal(cfg)
	cfgFile := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgFile, raw, 0o600); err != nil {
		return fail(err)
	}
	dns := exec.Command("pebble-challtestsrv", "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "",
		"-dns01", dnsAddr, "-http01", "", "-https01", "", "-tlsalpn01", "", "-management", challMgmt)
	dns.Stdout, dns.Stderr = io.Discard, io.Discard
	pebble := exec.Command("pebble", "-config", cfgFile, "-dnsserver", dnsAddr)
	// No random validation delays, no nonces rejected on purpose, no
	// authorization reused: each order validates its challenge.
	pebble.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	ca.logFile = filepath.Join(dir, "pebble.log")
	logf, err := os.Create(ca.logFile)
	if err != nil {
		return fail(err)
	}
	pebble.Stdout, pebble.Stderr = logf, logf
	for _, c := range []*exec.Cmd{dns, pebble} {
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			return fail(err)
		}
		procs = append(procs, c)
	}
	pem, err := waitRoot(30 * time.Second)
	if err != nil {
		return fail(fmt.Errorf("%w\nPebble's log:\n%s", err, readFile(ca.logFile)))
	}
	ca.issueRoots = x509.NewCertPool()
	if !ca.issueRoots.AppendCertsFromPEM(pem) {
		return fail(fmt.Errorf("Pebble's root is not PEM: %q", pem))
	}
	return stop, nil
}

// waitRoot fetches Pebble's issuing root once its management API answers.
func waitRoot(within time.Duration) ([]byte, error) {
	pool := x509.NewCertPool()
	raw, err := os.ReadFile(ca.httpsRoot)
	if err != nil {
		return nil, err
	}
	pool.AppendCertsFromPEM(raw)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	deadline := time.Now().Add(within)
	for {
		resp, err := client.Get(managementRoot)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				if r, err := client.Get(directory); err == nil {
					r.Body.Close()
					return body, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("Pebble did not answer within %s: %v", within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// selfSigned writes a certificate for 127.0.0.1 that is its own CA: Pebble
// serves its directory with it, and Caddy's ACME client trusts it.
func selfSigned(certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "caddy-dicer e2e/acme Pebble listener"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}
