package dicercmd

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
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

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/modules/diceradmin"
)

// `caddy dicer dashboard` (R13d): the dashboard at an address a person
// can type. Caddy's admin endpoint refuses a browser's request that has
// neither an Origin nor a Referer of its own origins, which is what a
// typed address sends, so the command serves the page on a loopback port
// of its own and relays the page's four reads (GET /dicer/daemons,
// /dicer/routes, /dicer/instances, /dicer/rollouts) to the admin endpoint, as the other
// `caddy dicer` commands ask it. Nothing else is relayed: the page stays
// read-only, and the admin endpoint's writes stay out of reach.

// dashboardListen is where `caddy dicer dashboard` serves by default.
const dashboardListen = "127.0.0.1:2020"

// dashboardReads are the admin routes the page reads, the only ones
// relayed.
var dashboardReads = []string{"/dicer/daemons", "/dicer/routes", "/dicer/instances", "/dicer/rollouts"}

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
			anyAddress, _ := flags.GetBool("insecure-listen")
			if err := checkDashboardListen(listen, anyAddress); err != nil {
				return err
			}
			admin, err := caddycmd.DetermineAdminAPIAddress(address, nil, config, adapter)
			if err != nil {
				return fmt.Errorf("finding the admin API: %w", err)
			}
			reader, err := newAdminReader(admin)
			if err != nil {
				return err
			}
			if reader.viaSocket {
				fmt.Fprintf(c.ErrOrStderr(), "warning: the admin API is the socket %s, which only its owner's group may read; "+
					"the dashboard relays its reads (every instance's labels) over TCP to whoever holds the URL's token\n", admin)
			}
			token, err := newDashboardToken()
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listening for the dashboard (--listen %q): %w", listen, err)
			}
			fmt.Fprintf(c.OutOrStdout(), "dashboard: http://%s/?token=%s (reading Caddy's admin API at %s; Ctrl-C stops)\n", ln.Addr(), token, admin)
			srv := &http.Server{Handler: dashboardHandler(reader, token), ReadHeaderTimeout: 10 * time.Second}
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serving the dashboard on %s: %w", ln.Addr(), err)
			}
			return nil
		},
	}
	cmd.Flags().String("listen", dashboardListen, "The address to serve the dashboard on (port 0: a free one); a loopback address unless --insecure-listen")
	cmd.Flags().Bool("insecure-listen", false, "Allow a --listen address that is not loopback (anyone who can reach it and holds the URL's token reads every instance's labels)")
	return cmd
}

// dashboardTokenCookie carries the URL's token for the page's own reads,
// once the page was opened with it.
const dashboardTokenCookie = "dicer_dashboard_token"

// newDashboardToken is a random token of 128 bits, base64url.
func newDashboardToken() (string, error) {
	raw := make([]byte, 16)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("making the dashboard's token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// checkDashboardListen refuses a --listen address that is not loopback
// (or localhost), unless anyAddress (--insecure-listen): the dashboard
// shows every instance's labels, which sometimes hold secrets.
func checkDashboardListen(listen string, anyAddress bool) error {
	if anyAddress {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return setting.Errorf("--listen", "%q is not host:port: %v", listen, err)
	}
	if !loopbackHost(host) {
		return setting.Errorf("--listen", "%q is not a loopback address: the dashboard shows every instance's labels; add --insecure-listen to serve it there anyway", listen)
	}
	return nil
}

// Dashboard is what `caddy dicer dashboard` serves for the admin
// endpoint admin (a host:port or a unix socket address), and the token a
// request must carry (see dashboardHandler). A program of its own may
// serve it on a listener of its own, as the command does.
func Dashboard(admin string) (http.Handler, string, error) {
	reader, err := newAdminReader(admin)
	if err != nil {
		return nil, "", err
	}
	token, err := newDashboardToken()
	if err != nil {
		return nil, "", err
	}
	return dashboardHandler(reader, token), token, nil
}

// dashboardHandler serves the page at / (and /dicer/dashboard, as on the
// admin endpoint) and relays its reads to the admin endpoint admin. A
// request must carry token, in the URL's `token` parameter (what the
// command prints) or in the cookie the page's first answer sets, else it
// is refused with 401: another account of the machine cannot read through
// it what the admin endpoint would refuse it. A request whose Host is not
// a loopback address or localhost is refused, so that a web page cannot
// read it by rebinding a name of its own to this machine.
func dashboardHandler(admin *adminReader, token string) http.Handler {
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, r *http.Request) {
		_ = diceradmin.ServeDashboard(w)
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
		given := r.URL.Query().Get("token")
		if given == "" {
			if c, err := r.Cookie(dashboardTokenCookie); err == nil {
				given = c.Value
			}
		} else if subtle.ConstantTimeCompare([]byte(given), []byte(token)) == 1 {
			http.SetCookie(w, &http.Cookie{Name: dashboardTokenCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		}
		if subtle.ConstantTimeCompare([]byte(given), []byte(token)) != 1 {
			http.Error(w, "open the dashboard with the URL 'caddy dicer dashboard' printed: its token is missing or wrong", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// adminReader GETs from Caddy's admin endpoint with one client (its
// connections reused: the page reads four routes twice a second), as
// caddycmd.AdminAPIRequest asks it: on the address's network, with the
// admin endpoint's own origin.
type adminReader struct {
	client     *http.Client
	origin     string // the request URLs' scheme and host
	sendOrigin bool   // as an Origin header: on a TCP address
	admin      string // as given, for errors
	viaSocket  bool   // the admin endpoint is a unix socket (or fd)
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
		a.origin, a.sendOrigin, a.viaSocket = "http://127.0.0.1", false, true // a host for the URL; the dial goes to the socket
		dial, _, _ = strings.Cut(addr.Host, "|")                              // without the socket's permission bits
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
