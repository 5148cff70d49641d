package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"
)

// `caddy dicer dashboard` (R13d): the dashboard at an address a person
// can type. Caddy's admin endpoint refuses a browser's request that has
// neither an Origin nor a Referer of its own origins, which is what a
// typed address sends, so the command serves the page on a loopback port
// of its own and relays the page's three reads (GET /dicer/daemons,
// /dicer/routes, /dicer/instances) to the admin endpoint, as the other
// `caddy dicer` commands ask it. Nothing else is relayed: the page stays
// read-only, and the admin endpoint's writes stay out of reach.

// dashboardListen is where `caddy dicer dashboard` serves by default.
const dashboardListen = "127.0.0.1:2020"

// dashboardReads are the admin routes the page reads, the only ones
// relayed.
var dashboardReads = []string{"/dicer/daemons", "/dicer/routes", "/dicer/instances"}

// dashboardCommand is `caddy dicer dashboard [--listen ADDR]`.
func dashboardCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dashboard [--listen 127.0.0.1:2020]",
		Short: "Serves the dashboard at an address to type into a browser, reading the admin endpoint",
		Long: `Serves the read-only dashboard (daemons, routes, instances, live) on --listen
(default 127.0.0.1:2020; port 0 picks a free one) and prints its URL. The
page's reads are relayed to the admin endpoint, found as the other
'caddy dicer' commands find it. Stop it with Ctrl-C.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			flags := c.Flags()
			address, _ := flags.GetString("address")
			config, _ := flags.GetString("config")
			adapter, _ := flags.GetString("adapter")
			listen, _ := flags.GetString("listen")
			admin, err := caddycmd.DetermineAdminAPIAddress(address, nil, config, adapter)
			if err != nil {
				return fmt.Errorf("finding the admin API: %w", err)
			}
			reader, err := newAdminReader(admin)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listening for the dashboard (--listen %q): %w", listen, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "dashboard: http://%s/ (reading Caddy's admin API at %s; Ctrl-C stops)\n", ln.Addr(), admin)
			srv := &http.Server{Handler: dashboardHandler(reader), ReadHeaderTimeout: 10 * time.Second}
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving the dashboard on %s: %w", ln.Addr(), err)
			}
			return nil
		},
	}
	cmd.Flags().String("listen", dashboardListen, "The address to serve the dashboard on (port 0: a free one)")
	return cmd
}

// dashboardHandler serves the page at / (and /dicer/dashboard, as on the
// admin endpoint) and relays its reads to the admin endpoint admin. A
// request whose Host is not a loopback address or localhost is refused,
// so that a web page cannot read it by rebinding a name of its own to
// this machine.
func dashboardHandler(admin *adminReader) http.Handler {
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, r *http.Request) {
		_ = adminDicer{}.dashboard(w, r)
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /dicer/dashboard", page)
	for _, uri := range dashboardReads {
		mux.HandleFunc("GET "+uri, func(w http.ResponseWriter, r *http.Request) { admin.relay(w, r, uri) })
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "the dashboard answers only to localhost or a loopback address", http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// adminReader GETs from Caddy's admin endpoint with one client (its
// connections reused: the page reads three routes twice a second), as
// caddycmd.AdminAPIRequest asks it: on the address's network, with the
// admin endpoint's own origin.
type adminReader struct {
	client     *http.Client
	origin     string // the request URLs' scheme and host
	sendOrigin bool   // as an Origin header: on a TCP address
	admin      string // as given, for errors
}

// newAdminReader is an adminReader for the admin address admin
// (host:port, unix/path or fd/N, as in Caddy's config).
func newAdminReader(admin string) (*adminReader, error) {
	addr, err := caddy.ParseNetworkAddress(admin)
	if err != nil || addr.PortRangeSize() > 1 {
		return nil, fmt.Errorf("invalid admin address %q: %v", admin, err)
	}
	a := &adminReader{admin: admin, origin: "http://" + addr.JoinHostPort(0), sendOrigin: true}
	network, dial := addr.Network, addr.JoinHostPort(0)
	if addr.IsUnixNetwork() || addr.IsFdNetwork() {
		a.origin, a.sendOrigin = "http://127.0.0.1", false // a host for the URL; the dial goes to the socket
		dial, _, _ = strings.Cut(addr.Host, "|")           // without the socket's permission bits
	}
	a.client = &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, dial)
			},
			MaxIdleConnsPerHost: len(dashboardReads),
		},
	}
	return a, nil
}

// relay answers w with the admin endpoint's answer to GET uri.
func (a *adminReader) relay(w http.ResponseWriter, r *http.Request, uri string) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, a.origin+uri, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if a.sendOrigin {
		req.Header.Set("Origin", a.origin)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		http.Error(w, fmt.Sprintf("asking Caddy's admin API at %s: %v", a.admin, err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	h := w.Header()
	h.Set("Content-Type", resp.Header.Get("Content-Type"))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// loopbackHost reports whether a request's Host names this machine:
// localhost or a loopback IP, with or without a port.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
