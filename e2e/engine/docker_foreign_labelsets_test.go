package engine

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels/labelsets"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// R2f on the real Engine, every label set: each label set of
// caddy-docker-proxy's README and examples/ and of Traefik's Docker
// provider docs (package labelsets) is a container of its own, and one
// real Caddy reads them all under `labels caddy-dicer caddy-docker-proxy
// traefik`. Through real requests, per set:
//
//   - a routed one answers 200 from its own container at every host it
//     names (a wildcard at a name under it), and with path prefixes, only
//     under them, the prefix stripped (handle_path) or kept (handle,
//     Traefik's PathPrefix) as the container sees it (helloserver's
//     X-Path), on the port the labels name; elsewhere on its hosts it is
//     not reached;
//   - a refused one (basic_auth, a middleware, a matcher, TLS options...)
//     is never reached at any host its labels name, nor on a selector
//     route that would take it if it were routable, and is warned about
//     once, naming the label;
//   - a set that does not apply (traefik.enable=false, no foreign label)
//     routes nothing and is not warned about.
//
// The labels are the documentation's with two rewrites: host names are
// made unique to the run and the case (`whoami.example.com` becomes
// `whoami-example-com.ls3-<run>.example.com`), and a network a set names
// (caddy_ingress_network, traefik.docker.network) is one the test
// creates, which the container is started on. The container serves the
// port the set names (helloserver's $PORT); a set naming none publishes
// 8080, its only port, as R3 wants where Traefik would take the image's
// one exposed port: the closest honest outcome.
func TestDocker_R2f_every_label_set_through_caddy(t *testing.T) {
	began := time.Now()
	cli := engine(t)
	app := dockertest.Name("labelsets")
	selHost := hostName("ls-selector")
	_, logFile := dockerCaddy(t, "", fmt.Sprintf(`
http://%s:%d {
	reverse_proxy {
		dynamic docker {
			selector app=%s
			port 8080
			labels caddy-dicer caddy-docker-proxy traefik
		}
	}
}
:%d {
	reverse_proxy {
		dynamic docker {
			labels caddy-dicer caddy-docker-proxy traefik
		}
	}
}`, selHost, httpPort, app, httpPort))

	var cases []*setCase
	for _, c := range labelsets.CaddyDockerProxy() {
		cases = append(cases, newSetCase("cdp", len(cases), c))
	}
	for _, c := range labelsets.Traefik() {
		cases = append(cases, newSetCase("traefik", len(cases), c))
	}
	for _, c := range cases {
		if c.network != "" {
			c.opts.Network = dockertest.CreateNetwork(t, cli, c.network)
			c.rewriteNetwork(c.opts.Network)
		}
		c.opts.Labels["app"] = app
	}
	startAll(t, cli, cases)
	started := time.Now()

	// Every routed set answers from its container at its first host.
	pending := map[*setCase]bool{}
	for _, c := range cases {
		if c.routed() {
			pending[c] = true
		}
	}
	var last testkit.Result
	if !testkit.UntilEvery(60*time.Second, 50*time.Millisecond, func() bool {
		for c := range pending {
			host, path := c.probe()
			if last = getFrom(host, path); last.Is(http.StatusOK, hello(c.name)) {
				delete(pending, c)
			}
		}
		return len(pending) == 0
	}) {
		var names []string
		for c := range pending {
			names = append(names, c.name)
		}
		t.Fatalf("not routed within 60 s: %q (last answer %s); Caddy's log about R2f:\n%s", names, last,
			strings.Join(testkit.LogLines(t, logFile, "(R2f)"), "\n"))
	}
	// Every refused set is warned about (the warning follows the event
	// that routes nothing: wait for it).
	testkit.Eventually(t, 30*time.Second, "every refused set warned about", func() bool {
		for _, c := range cases {
			if c.Want.Refused != "" && len(c.warnings(t, logFile)) == 0 {
				return false
			}
		}
		return true
	})
	routedAt := time.Now()

	for _, c := range cases {
		t.Run(c.set+"/"+c.Name, func(t *testing.T) { c.check(t, logFile) })
	}

	// On a selector route that takes every container of the test, only
	// the sets that apply to nothing answer (no caddy.host, not refused):
	// a refused one, whose caddy.host is gone, is not taken either.
	want := map[string]bool{}
	for _, c := range cases {
		if c.Want.None && c.Want.Protected == "" && c.Labels["caddy.host"] == "" {
			want[hello(c.name)] = true
		}
	}
	seen := map[string]bool{}
	for range 8 * len(want) {
		r := getFrom(selHost, "/")
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("selector route: %s, want 200", r)
		}
		seen[r.Body] = true
	}
	if !maps.Equal(seen, want) {
		t.Errorf("the selector route was answered by %v, want exactly %v", slices.Sorted(maps.Keys(seen)), slices.Sorted(maps.Keys(want)))
	}

	// Each refusal counted, per set, as it was warned (the counter is the
	// process's: at least this test's).
	for _, set := range []string{"caddy-docker-proxy", "traefik"} {
		n := 0
		for _, c := range cases {
			if c.Want.Refused != "" && c.setName() == set {
				n++
			}
		}
		if got := metric(t, "caddy_dicer_foreign_labels_refused_total", `kind="docker"`, `set="`+set+`"`); got < float64(n) {
			t.Errorf("caddy_dicer_foreign_labels_refused_total{set=%q} = %v, want at least %d", set, got, n)
		}
	}
	if lines := testkit.LogLines(t, logFile, "(R2f)", "$2"); len(lines) > 0 {
		t.Errorf("a warning shows a password hash: %s", lines[0])
	}
	t.Logf("%d label sets: containers started in %s, all routed and warned %s later, checked in %s; %s in all",
		len(cases), started.Sub(began).Round(time.Millisecond), routedAt.Sub(started).Round(time.Millisecond),
		time.Since(routedAt).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

// setCase is one label set of labelsets as this test runs it.
type setCase struct {
	labelsets.Case
	set     string            // "cdp" or "traefik"
	name    string            // the container's name for dockertest, and its helloserver's
	hosts   map[string]string // the documentation's host names, rewritten
	network string            // the network the set names, rewritten ("" none)
	opts    dockertest.Options
}

// newSetCase rewrites c's host names to ones unique to the run and to
// index i, and gives it the container that serves what it wants.
func newSetCase(set string, i int, c labelsets.Case) *setCase {
	s := &setCase{Case: c, set: set, name: fmt.Sprintf("ls%02d-%s", i, strings.ReplaceAll(c.Name, "_", "-")), hosts: map[string]string{}}
	tag := "ls" + strconv.Itoa(i)
	rename := func(h string) string {
		wild := strings.HasPrefix(h, "*.")
		h = strings.ReplaceAll(strings.TrimPrefix(strings.ToLower(h), "*."), ".", "-")
		if wild {
			return "*." + h + "." + hostName(tag)
		}
		return h + "." + hostName(tag)
	}
	s.RenameHosts(rename, func(h, to string) { s.hosts[h] = to })
	for _, k := range []string{"caddy_ingress_network", "traefik.docker.network"} {
		if n, ok := s.Labels[k]; ok {
			s.network = tag + "-" + n
		}
	}
	port := 8080
	switch {
	case s.Want.Port != 0:
		port = int(s.Want.Port)
	case s.Want.None && s.Labels["caddy.port"] != "":
		port, _ = strconv.Atoi(s.Labels["caddy.port"]) // routed by caddy-dicer's own labels
	case s.routed():
		s.opts.Ports = []string{"127.0.0.1::8080"} // no port named: the only one published (R3)
	}
	s.opts.Name = s.name
	s.opts.Labels = s.Labels
	s.opts.Env = []string{"PORT=" + strconv.Itoa(port)}
	return s
}

// rewriteNetwork names the test's network where the set names its own.
func (s *setCase) rewriteNetwork(full string) {
	for _, k := range []string{"caddy_ingress_network", "traefik.docker.network"} {
		if _, ok := s.Labels[k]; ok {
			s.Labels[k] = full
		}
	}
	if s.Want.Network != "" {
		s.Want.Network = full
	}
}

func (s *setCase) setName() string {
	if s.set == "cdp" {
		return "caddy-docker-proxy"
	}
	return "traefik"
}

// routed reports a set routed by its foreign labels, or by caddy-dicer's
// own beside them (a set that applies to nothing but carries caddy.host).
func (s *setCase) routed() bool {
	return s.Want.Routed() || s.Want.None && s.Want.Protected == "" && s.Labels["caddy.host"] != ""
}

// routedHosts are the hosts a routed set is routed at; a wildcard's as a
// name under it.
func (s *setCase) routedHosts() []string {
	hosts := s.Want.Hosts
	if s.Want.None {
		hosts = strings.Split(s.Labels["caddy.host"], ",")
	}
	out := make([]string, len(hosts))
	for i, h := range hosts {
		if rest, ok := strings.CutPrefix(h, "*."); ok {
			h = "any." + rest
		}
		out[i] = h
	}
	return out
}

// probe is the first request a routed set answers.
func (s *setCase) probe() (host, path string) {
	path = "/probe"
	if len(s.Want.Paths) > 0 {
		path = s.Want.Paths[0] + "/probe"
	}
	return s.routedHosts()[0], path
}

// getFrom sends GET path for host to this process's Caddy.
func getFrom(host, path string) testkit.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r := testkit.Caddy{Addr: fmt.Sprintf("127.0.0.1:%d", httpPort)}.Get(ctx, host, path)
	if r.Err == nil && r.Header.Get(runHeader) != dockertest.RunID() {
		r.Err = errForeign
	}
	return r
}

// warnings are Caddy's R2f warnings about the set's container.
func (s *setCase) warnings(t *testing.T, logFile string) []string {
	return testkit.LogLines(t, logFile, "(R2f)", `"`+dockertest.Name(s.name)+`"`)
}

// check asserts what the set's container gets.
func (s *setCase) check(t *testing.T, logFile string) {
	t.Logf("from %s: %q", s.Source, s.Labels)
	body := hello(s.name)
	notReached := func(host, path string) {
		t.Helper()
		r := getFrom(host, path)
		if r.Err != nil || r.Body == body || r.Header.Get("X-Path") != "" ||
			r.Status != http.StatusServiceUnavailable && r.Status != http.StatusNotFound {
			t.Errorf("%s%s: %s (X-Path %q), want 503 or 404 not from the container", host, path, r, r.Header.Get("X-Path"))
		}
	}
	warned := s.warnings(t, logFile)
	if !s.routed() {
		for _, host := range slices.Sorted(maps.Values(s.hosts)) {
			if rest, ok := strings.CutPrefix(host, "*."); ok {
				host = "any." + rest
			}
			for _, path := range []string{"/", "/api/x", "/source/x", "/x/y"} {
				notReached(host, path)
			}
		}
		refused := s.Want.Refused
		if refused == "" {
			refused = s.Want.Protected // refused under every set (R2f)
		}
		switch {
		case refused == "" && len(warned) > 0:
			t.Errorf("warned about, want not: %s", warned[0])
		case refused != "" && len(warned) != 1:
			t.Errorf("%d warnings, want 1: %q", len(warned), warned)
		case refused != "" && !strings.Contains(warned[0], `label \"`+refused+`\"`): // quoted, in JSON
			t.Errorf("the warning does not name %s: %s", refused, warned[0])
		}
		return
	}
	if len(warned) > 0 {
		t.Errorf("warned about, want routed: %s", warned[0])
	}
	hosts := s.routedHosts()
	paths := s.Want.Paths
	if len(paths) == 0 {
		paths = []string{""}
	}
	for _, host := range hosts {
		for _, p := range paths {
			for _, rest := range []string{"/a/b", "/healthz"} {
				r := getFrom(host, p+rest)
				want := p + rest
				if s.Want.Strip {
					want = rest
				}
				wantBody := body
				if want == "/healthz" {
					wantBody = "ok\n" // the app's own /healthz: the path it got
				}
				if !r.Is(http.StatusOK, wantBody) || r.Header.Get("X-Path") != want {
					t.Errorf("%s%s: %s (X-Path %q), want 200 %q with X-Path %q", host, p+rest, r, r.Header.Get("X-Path"), wantBody, want)
				}
			}
		}
		if len(s.Want.Paths) > 0 {
			notReached(host, "/elsewhere")
			notReached(host, s.Want.Paths[0]+"x") // prefixes match on segment boundaries
		}
	}
}

// startAll starts the cases' containers, several at once, and removes
// them when t ends, several at once (one by one, seventy removals take
// longer than the test).
func startAll(t *testing.T, cli *client.Client, cases []*setCase) {
	t.Helper()
	var mu sync.Mutex
	var ids []string
	var errs []error
	t.Cleanup(func() {
		inParallel(ids, func(id string) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true}); err != nil && !strings.Contains(err.Error(), "No such container") {
				t.Errorf("removing container %s: %v", id, err)
			}
		})
	})
	inParallel(cases, func(c *setCase) {
		ctr, err := dockertest.StartContainer(context.Background(), cli, c.opts)
		mu.Lock()
		defer mu.Unlock()
		if ctr.ID != "" {
			ids = append(ids, ctr.ID)
		}
		if err != nil {
			errs = append(errs, err)
		}
	})
	if len(errs) > 0 {
		t.Fatalf("starting the containers: %v", errs)
	}
}

// inParallel calls f on each of items, eight at a time, and returns when
// all calls have.
func inParallel[T any](items []T, f func(T)) {
	work := make(chan T)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				f(it)
			}
		}()
	}
	for _, it := range items {
		work <- it
	}
	close(work)
	wg.Wait()
}
