// Package docker is the adapter for the Docker Engine: it follows the
// Engine's container events and translates containers into
// catalog.Instance values fed to a catalog.Sink (R11). It knows nothing of
// routing rules or of Caddy, and it only reads from the Engine.
package docker

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

// DefaultHost is the Engine's usual unix socket, used when neither the
// Host setting nor DOCKER_HOST names one.
const DefaultHost = "unix:///var/run/docker.sock"

// Default reconnect backoff bounds.
const (
	DefaultMinBackoff = follow.DefaultMinBackoff
	DefaultMaxBackoff = follow.DefaultMaxBackoff
)

// Config is what the adapter needs; the Caddy module fills it from its
// settings (R9). New checks it and reads its files.
type Config struct {
	// Host is the Engine endpoint: "unix:///var/run/docker.sock" or
	// "tcp://host:port". "" means $DOCKER_HOST, else DefaultHost (see
	// Resolved).
	Host string
	// CAFile, CertFile and KeyFile protect a TCP Engine with TLS: CAFile
	// verifies the Engine's certificate (the system roots when empty),
	// CertFile and KeyFile, given together, are the client certificate.
	// Any of them makes the connection TLS. New reads them.
	CAFile, CertFile, KeyFile string
	// MinBackoff and MaxBackoff bound the re-list delay (capped
	// exponential with jitter, see follow.Pace); zero means 250ms and 15s.
	// Attempts to reach an Engine on a unix socket that is not there are
	// capped at follow.LocalConnectMax instead.
	MinBackoff, MaxBackoff time.Duration
}

// Resolved returns c with Host filled in: $DOCKER_HOST when Host is empty,
// else DefaultHost. Surrounding whitespace is dropped.
func (c Config) Resolved() Config {
	c.Host = strings.TrimSpace(c.Host)
	if c.Host == "" {
		c.Host = strings.TrimSpace(os.Getenv("DOCKER_HOST"))
	}
	if c.Host == "" {
		c.Host = DefaultHost
	}
	return c
}

func (c Config) usesTLS() bool {
	return c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// loadTLS reads the TLS files of a checked c, once: the client's TLS
// configuration (nil without TLS) and the files' contents, which make part
// of the connection's key.
func (c Config) loadTLS() (*tls.Config, []byte, error) {
	if !c.usesTLS() {
		return nil, nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	var material []byte
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("tls ca: %w", err)
		}
		// Only these authorities, as the Engine's own client does.
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("tls ca: %s holds no PEM certificate", c.CAFile)
		}
		material = append(material, pem...)
	}
	if c.CertFile != "" {
		certPEM, err := os.ReadFile(c.CertFile)
		if err != nil {
			return nil, nil, fmt.Errorf("tls cert: %w", err)
		}
		keyPEM, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("tls key: %w", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("tls cert: loading %s with the key %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		material = append(append(material, certPEM...), keyPEM...)
	}
	return cfg, material, nil
}

// Check checks the (resolved) address and the TLS settings without reading
// the TLS files, for a config adapted on another machine than the one it
// runs on; New checks the files too. Each error names the setting at
// fault: "address: ...", "tls: ...", "tls cert: ...", "tls key: ...".
func (c Config) Check() error {
	c = c.Resolved()
	tcp, err := parseHost(c.Host)
	if err != nil {
		return err
	}
	if !tcp && c.usesTLS() {
		return fmt.Errorf("tls: not allowed with the unix socket address %q (TLS protects a tcp:// Engine)", c.Host)
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return errors.New("tls cert: given without a key (set tls key too)")
	case c.KeyFile != "" && c.CertFile == "":
		return errors.New("tls key: given without a cert (set tls cert too)")
	}
	if c.MinBackoff < 0 || c.MaxBackoff < 0 {
		return errors.New("backoff: must not be negative")
	}
	return nil
}

// parseHost checks that host is unix:///path or tcp://host:port and says
// whether it is TCP.
func parseHost(host string) (tcp bool, err error) {
	scheme, rest, ok := strings.Cut(host, "://")
	if !ok {
		return false, fmt.Errorf("address: %q is neither unix:///path nor tcp://host:port", host)
	}
	switch scheme {
	case "unix":
		if strings.TrimLeft(rest, "/") == "" {
			return false, fmt.Errorf("address: %q names no socket path", host)
		}
		return false, nil
	case "tcp":
		u, err := url.Parse(host)
		if err != nil {
			return true, fmt.Errorf("address: %q: %w", host, err)
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return true, fmt.Errorf("address: %q: only tcp://host:port", host)
		}
		h, port, err := net.SplitHostPort(u.Host)
		if err != nil || h == "" {
			return true, fmt.Errorf("address: %q names no host and port (tcp://host:port; the Engine listens on 2375, or 2376 with TLS)", host)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return true, fmt.Errorf("address: %q: port %q is not a number from 1 to 65535", host, port)
		}
		return true, nil
	case "ssh":
		return false, fmt.Errorf("address: %q: ssh:// is not supported; forward the Engine's socket and use unix:// or tcp://", host)
	default:
		return false, fmt.Errorf("address: %q: the scheme %q is neither unix nor tcp", host, scheme)
	}
}

// IsTCP reports whether host names a tcp:// Engine endpoint.
func IsTCP(host string) bool {
	return strings.HasPrefix(strings.TrimSpace(host), "tcp://")
}

// DaemonHost returns the host part of a tcp:// address when it is not a
// loopback (or unspecified) address, else "". R4 reaches ports published on
// every host address there.
func DaemonHost(host string) string {
	if !IsTCP(host) {
		return ""
	}
	u, err := url.Parse(strings.TrimSpace(host))
	if err != nil {
		return ""
	}
	h := u.Hostname()
	if h == "" {
		return ""
	}
	if l := strings.TrimSuffix(strings.ToLower(h), "."); l == "localhost" || strings.HasSuffix(l, ".localhost") {
		return ""
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsUnspecified() {
			return ""
		}
	}
	return h
}
