package docker

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

func TestResolved(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	if got := (Config{}).Resolved().Host; got != DefaultHost {
		t.Errorf("empty Host, no DOCKER_HOST: %q, want %q", got, DefaultHost)
	}
	t.Setenv("DOCKER_HOST", " tcp://10.1.2.3:2376 ")
	if got := (Config{}).Resolved().Host; got != "tcp://10.1.2.3:2376" {
		t.Errorf("empty Host, DOCKER_HOST set: %q", got)
	}
	if got := (Config{Host: " unix:///run/other.sock\n"}).Resolved().Host; got != "unix:///run/other.sock" {
		t.Errorf("Host set: %q, want it trimmed and preferred to DOCKER_HOST", got)
	}
}

// New checks the settings and reads the TLS files; each error names the
// setting at fault.
func TestNew(t *testing.T) {
	t.Setenv("DOCKER_HOST", "")
	files := writeTLSFiles(t)
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // prefix naming the setting; "" means valid
	}{
		{name: "default", cfg: Config{}},
		{name: "unix", cfg: Config{Host: "unix:///var/run/docker.sock"}},
		{name: "tcp", cfg: Config{Host: "tcp://10.0.0.5:2375"}},
		{name: "tcp ipv6", cfg: Config{Host: "tcp://[fd00::5]:2375"}},
		{name: "tcp with tls", cfg: Config{Host: "tcp://docker.example.com:2376", CAFile: files.ca, CertFile: files.cert, KeyFile: files.key}},
		{name: "tcp with ca only", cfg: Config{Host: "tcp://docker.example.com:2376", CAFile: files.ca}},
		{name: "tcp with client cert, system roots", cfg: Config{Host: "tcp://docker.example.com:2376", CertFile: files.cert, KeyFile: files.key}},
		{name: "no scheme", cfg: Config{Host: "/var/run/docker.sock"}, wantErr: "address: "},
		{name: "host:port without scheme", cfg: Config{Host: "10.0.0.5:2375"}, wantErr: "address: "},
		{name: "http scheme", cfg: Config{Host: "http://10.0.0.5:2375"}, wantErr: "address: "},
		{name: "ssh scheme", cfg: Config{Host: "ssh://me@host"}, wantErr: "address: "},
		{name: "npipe", cfg: Config{Host: "npipe:////./pipe/docker_engine"}, wantErr: "address: "},
		{name: "unix without path", cfg: Config{Host: "unix://"}, wantErr: "address: "},
		{name: "tcp without port", cfg: Config{Host: "tcp://10.0.0.5"}, wantErr: "address: "},
		{name: "tcp without host", cfg: Config{Host: "tcp://:2375"}, wantErr: "address: "},
		{name: "tcp port zero", cfg: Config{Host: "tcp://10.0.0.5:0"}, wantErr: "address: "},
		{name: "tcp port too big", cfg: Config{Host: "tcp://10.0.0.5:65536"}, wantErr: "address: "},
		{name: "tcp port not a number", cfg: Config{Host: "tcp://10.0.0.5:docker"}, wantErr: "address: "},
		{name: "tcp unparsable", cfg: Config{Host: "tcp://10.0.0.5:2375%zz"}, wantErr: "address: "},
		{name: "tcp with user", cfg: Config{Host: "tcp://me@10.0.0.5:2375"}, wantErr: "address: "},
		{name: "tls with unix socket", cfg: Config{Host: "unix:///var/run/docker.sock", CAFile: files.ca}, wantErr: "tls: "},
		{name: "tls with default socket", cfg: Config{CertFile: files.cert, KeyFile: files.key}, wantErr: "tls: "},
		{name: "cert without key", cfg: Config{Host: "tcp://h:2376", CertFile: files.cert}, wantErr: "tls cert: "},
		{name: "key without cert", cfg: Config{Host: "tcp://h:2376", KeyFile: files.key}, wantErr: "tls key: "},
		{name: "missing ca file", cfg: Config{Host: "tcp://h:2376", CAFile: filepath.Join(t.TempDir(), "nope.pem")}, wantErr: "tls ca: "},
		{name: "ca file without PEM", cfg: Config{Host: "tcp://h:2376", CAFile: files.garbage}, wantErr: "tls ca: "},
		{name: "key not matching cert", cfg: Config{Host: "tcp://h:2376", CertFile: files.cert, KeyFile: files.otherKey}, wantErr: "tls cert: "},
		{name: "missing cert file", cfg: Config{Host: "tcp://h:2376", CertFile: files.garbage + ".nope", KeyFile: files.key}, wantErr: "tls cert: "},
		{name: "negative backoff", cfg: Config{Pace: follow.Pace{Min: -time.Second}}, wantErr: "backoff: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New = nil error, want one starting with %q", tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not name the setting (want prefix %q)", err, tt.wantErr)
			}
		})
	}
}

func TestNewUsesDockerHost(t *testing.T) {
	t.Setenv("DOCKER_HOST", "bogus")
	if _, err := New(Config{}); err == nil || !strings.HasPrefix(err.Error(), "address: ") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("New with DOCKER_HOST=bogus: %v, want an address error quoting it", err)
	}
	if err := (Config{}).Check(); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("Check with DOCKER_HOST=bogus: %v, want an address error quoting it", err)
	}
}

// The key changes with a TLS file's contents, so that a renewed file makes
// a new connection, and stays the same for the same files.
func TestKey(t *testing.T) {
	files := writeTLSFiles(t)
	cfg := Config{Host: "tcp://h:2376", CAFile: files.ca, CertFile: files.cert, KeyFile: files.key}
	key := func() string {
		t.Helper()
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a.Key()
	}
	k1, k2 := key(), key()
	if k1 != k2 || len(k1) != 64 {
		t.Fatalf("keys %q and %q for the same settings", k1, k2)
	}
	other := writeTLSFiles(t)
	if err := os.WriteFile(files.ca, mustRead(t, other.ca), 0o600); err != nil {
		t.Fatal(err)
	}
	if key() == k1 {
		t.Fatal("a renewed CA file kept the key")
	}
}

func mustRead(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDaemonHost(t *testing.T) {
	tests := map[string]string{
		"":                              "",
		"unix:///var/run/docker.sock":   "",
		"tcp://10.0.0.5:2376":           "10.0.0.5",
		"tcp://docker.example.com:2375": "docker.example.com",
		"tcp://[fd00::5]:2376":          "fd00::5",
		" tcp://10.0.0.5:2376 ":         "10.0.0.5", //nolint:gocritic // surrounding blanks are the case under test
		"tcp://127.0.0.1:2375":          "",
		"tcp://127.1.2.3:2375":          "",
		"tcp://[::1]:2375":              "",
		"tcp://[::ffff:127.0.0.1]:2375": "",
		"tcp://0.0.0.0:2375":            "",
		"tcp://[::]:2375":               "",
		"tcp://localhost:2375":          "",
		"tcp://LocalHost.:2375":         "",
		"tcp://docker.localhost:2375":   "",
		"tcp://10.0.0.5":                "10.0.0.5",
	}
	for in, want := range tests {
		if got := DaemonHost(in); got != want {
			t.Errorf("DaemonHost(%q) = %q, want %q", in, got, want)
		}
	}
}

type tlsFiles struct {
	ca, cert, key, otherKey, garbage string
	caCert                           *x509.Certificate
	caKey                            *ecdsa.PrivateKey
}

// writeTLSFiles writes a self-signed CA, a client certificate it signed
// and its key, another key, and a file that is not PEM.
func writeTLSFiles(t *testing.T) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	ca, caKey := newCert(t, nil, nil, true)
	cert, key := newCert(t, ca, caKey, false)
	_, other := newCert(t, nil, nil, false)
	f := tlsFiles{
		ca:       filepath.Join(dir, "ca.pem"),
		cert:     filepath.Join(dir, "cert.pem"),
		key:      filepath.Join(dir, "key.pem"),
		otherKey: filepath.Join(dir, "other-key.pem"),
		garbage:  filepath.Join(dir, "garbage.pem"),
		caCert:   ca,
		caKey:    caKey,
	}
	writePEM(t, f.ca, "CERTIFICATE", ca.Raw)
	writePEM(t, f.cert, "CERTIFICATE", cert.Raw)
	writeKey(t, f.key, key)
	writeKey(t, f.otherKey, other)
	if err := os.WriteFile(f.garbage, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// newCert makes a certificate signed by parent (self-signed when nil),
// valid for 127.0.0.1 and as a client and server certificate.
func newCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "caddy-dicer test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		BasicConstraintsValid: true,
		IsCA:                  isCA,
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, path string, key *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, path, "EC PRIVATE KEY", der)
}
