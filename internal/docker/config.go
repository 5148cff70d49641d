// Package docker is the adapter for the Docker Engine: it follows the
// Engine's container events and translates containers into
// catalog.Instance values fed to a catalog.Sink (R11). It knows nothing of
// routing rules or of Caddy, and it only reads from the Engine.
package docker

import (
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// DefaultHost is the Engine's usual unix socket, used when neither the
// Host setting nor DOCKER_HOST names one.
const DefaultHost = "unix:///var/run/docker.sock"

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
	// Pace bounds the delays between sessions; zero values are the
	// defaults, and on a unix socket a zero ConnectMax is
	// follow.LocalConnectMax.
	Pace follow.Pace
	// Resync is how often a session also re-lists every container and
	// applies the differences (follow.Loop.Resync): the Engine drops
	// events for a subscriber that falls behind, and an event stream can
	// stall (a frozen socket proxy) while the Engine still answers. Zero:
	// DefaultResync; negative: never. ResyncTimeout bounds one re-listing
	// (zero: follow.DefaultResyncTimeout) and StallGrace is
	// follow.Loop.StallGrace. Not Caddyfile settings.
	Resync, ResyncTimeout, StallGrace time.Duration
	// Labels are the label sets containers are routed by (R2f): always
	// caddy-dicer's own; with foreignlabels.SetCaddyDockerProxy and
	// foreignlabels.SetTraefik, those proxies' labels too, read as they
	// are and refused when they ask for what a dynamic source cannot do.
	// Zero: caddy-dicer's only.
	Labels foreignlabels.Set
	// Follow is the selector a container's own labels must match for the
	// adapter to see it at all (R2g): one that does not is neither listed
	// nor fetched, and its events are dropped. Zero: every container.
	Follow selector.Selector
}

// DefaultResync is how often a Docker session re-lists every container:
// one ContainerList call, the differences applied. A lost or stalled
// event is so corrected within it (plus ResyncTimeout if the connection
// the re-listing uses is stalled too).
const DefaultResync = 10 * time.Second

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
		return setting.With("tls", []string{"address"}, "not allowed with the unix socket address %q (TLS protects a tcp:// Engine)", c.Host)
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		return setting.Errorf("tls cert", "given without a key (set tls key too)")
	case c.KeyFile != "" && c.CertFile == "":
		return setting.Errorf("tls key", "given without a cert (set tls cert too)")
	}
	return c.Pace.Check()
}

// parseHost checks that host is unix:///path or tcp://host:port and says
// whether it is TCP.
func parseHost(host string) (tcp bool, err error) {
	scheme, rest, ok := strings.Cut(host, "://")
	if !ok {
		return false, setting.Errorf("address", "%q is neither unix:///path nor tcp://host:port", host)
	}
	switch scheme {
	case "unix":
		if strings.TrimLeft(rest, "/") == "" {
			return false, setting.Errorf("address", "%q names no socket path", host)
		}
		return false, nil
	case "tcp":
		u, err := url.Parse(host)
		if err != nil {
			return true, setting.Errorf("address", "%q: %w", host, err)
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return true, setting.Errorf("address", "%q: only tcp://host:port", host)
		}
		h, port, err := net.SplitHostPort(u.Host)
		if err != nil || h == "" {
			return true, setting.Errorf("address", "%q names no host and port (tcp://host:port; the Engine listens on 2375, or 2376 with TLS)", host)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return true, setting.Errorf("address", "%q: port %q is not a number from 1 to 65535", host, port)
		}
		return true, nil
	case "ssh":
		return false, setting.Errorf("address", "%q: ssh:// is not supported; forward the Engine's socket and use unix:// or tcp://", host)
	default:
		return false, setting.Errorf("address", "%q: the scheme %q is neither unix nor tcp", host, scheme)
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
	return follow.RemoteHost(u.Hostname())
}
