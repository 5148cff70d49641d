package docker

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"time"

	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

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
			return nil, nil, setting.Wrap("tls ca", err)
		}
		// Only these authorities, as the Engine's own client does.
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, nil, setting.Errorf("tls ca", "%s holds no PEM certificate", c.CAFile)
		}
		material = append(material, pem...)
	}
	if c.CertFile != "" {
		certPEM, err := os.ReadFile(c.CertFile)
		if err != nil {
			return nil, nil, setting.Wrap("tls cert", err)
		}
		keyPEM, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return nil, nil, setting.Wrap("tls key", err)
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, setting.With("tls cert", []string{"tls key"}, "loading %s with the key %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
		material = append(append(material, certPEM...), keyPEM...)
	}
	return cfg, material, nil
}

// NewClient makes an Engine client for the Adapter's settings (the Swarm
// adapter shares them). The API version is negotiated at the
// first call, so an older Engine works.
func (a *Adapter) NewClient() (*client.Client, error) {
	opts := []client.Opt{}
	if a.tls != nil {
		// Before WithHost, which sets up this transport's dialer.
		opts = append(opts, client.WithHTTPClient(&http.Client{
			Transport:     &http.Transport{TLSClientConfig: a.tls.Clone(), MaxIdleConns: 6, IdleConnTimeout: 30 * time.Second},
			CheckRedirect: client.CheckRedirect,
		}))
	}
	opts = append(opts,
		client.WithHost(a.host),
		client.WithAPIVersionNegotiation(),
		client.WithUserAgent("caddy-dicer"),
	)
	return client.NewClientWithOpts(opts...)
}
