//go:build e2e && linux

package swarm

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels/labelsets"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// onServices are the label sets of package labelsets that this test runs
// as Swarm services (deploy labels): those that name a port or use
// caddy-docker-proxy's default 80 (a service publishes none, so R3's
// "the only published port" does not apply) and a single-label host (the
// fixture's Caddy reads foreign labels on http://*.foreign.swarm.test
// only, its Caddyfile fixed at setup). The rest run on containers,
// TestDocker_R2f_every_label_set_through_caddy.
var onServices = []string{
	// routed
	"readme_whoami", "readme_swarm_service", "readme_upstreams_http_port", "readme_handle_keeps_prefix",
	"readme_handle_path_strips", "readme_multiple_domains", "two_kept_prefixes", "ingress_network",
	"doc_rule_and_port", "doc_enable_network", "scheme_http", "two_routers_same_port",
	// refused: protections and options that would be skipped
	"basic_auth", "header", "readme_run_tls_internal", "readme_upstreams_https",
	"doc_basic_auth", "setup_dashboard_basicauth", "basicauth_middleware_own_service", "expose_advanced_secure_headers",
}

// R2f on Swarm, label set by label set: each set of onServices is the
// deploy labels of a service of its own (hosts rewritten to names of the
// fixture's *.foreign.swarm.test, a network the set names to the
// fixture's overlay network). Routed ones answer from their task at every
// host, under their prefixes, stripped or kept as the task sees it
// (X-Path); refused ones are never reached (503) and warned about once
// naming the label.
func TestSwarm_R2f_label_sets_on_services(t *testing.T) {
	began := time.Now()
	want := map[string]bool{}
	for _, n := range onServices {
		want[n] = true
	}
	var sets []*serviceSet
	for _, c := range append(labelsets.CaddyDockerProxy(), labelsets.Traefik()...) {
		if want[c.Name] {
			sets = append(sets, newServiceSet(len(sets), c))
			delete(want, c.Name)
		}
	}
	if len(want) > 0 {
		t.Fatalf("not in labelsets: %v", want)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 6)
	for _, s := range sets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out, err := docker(2*time.Minute, s.args()...)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("docker service create %s: %v\n%s", s.name, err, out)
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		names := []string{"service", "rm"}
		for _, s := range sets {
			names = append(names, s.name)
		}
		if out, err := docker(2*time.Minute, names...); err != nil && !strings.Contains(out, "not found") {
			t.Errorf("docker service rm: %v\n%s", err, out)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	created := time.Now()

	caddy := testkit.Caddy{Addr: caddyAddr, Client: httpClient}
	getPath := func(host, path string) testkit.Result {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return caddy.Get(ctx, host, path)
	}
	pending := map[*serviceSet]bool{}
	for _, s := range sets {
		if s.Want.Routed() {
			pending[s] = true
		}
	}
	if !testkit.UntilEvery(2*time.Minute, 200*time.Millisecond, func() bool {
		var probes sync.WaitGroup // at once: a host not routed yet waits out lb_try_duration
		var answered sync.Map
		for s := range pending {
			probes.Add(1)
			go func() {
				defer probes.Done()
				p := "/probe"
				if len(s.Want.Paths) > 0 {
					p = s.Want.Paths[0] + p
				}
				if getPath(s.Want.Hosts[0], p).Is(http.StatusOK, "hello from "+s.name+"\n") {
					answered.Store(s, true)
				}
			}()
		}
		probes.Wait()
		answered.Range(func(s, _ any) bool { delete(pending, s.(*serviceSet)); return true })
		return len(pending) == 0
	}) {
		var names []string
		for s := range pending {
			names = append(names, s.Name)
		}
		t.Fatalf("not routed within 2 minutes: %v; Caddy's log:\n%s", names, caddyLog("R2f"))
	}
	testkit.Eventually(t, time.Minute, "every refused set warned about", func() bool {
		logs, _ := docker(30*time.Second, "logs", caddyName)
		for _, s := range sets {
			if s.Want.Refused != "" && !strings.Contains(logs, `"`+s.name+`.`) {
				return false
			}
		}
		return true
	})
	routed := time.Now()

	logs, _ := docker(30*time.Second, "logs", caddyName)
	for _, s := range sets {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()        // a refused host waits out lb_try_duration (5 s) before its 503
			var warned []string // an instance is a task: "<service>.<slot>.<task ID>"
			for _, l := range strings.Split(logs, "\n") {
				if strings.Contains(l, "(R2f)") && strings.Contains(l, `"`+s.name+`.`) {
					warned = append(warned, l)
				}
			}
			if !s.Want.Routed() {
				// One warning per connection: the sources reading the set
				// refuse it naming Want.Refused; those of caddy-dicer's labels
				// only (another connection) refuse its protection label, if it
				// has one, with a warning of their own (R2f).
				naming := 0
				for _, w := range warned {
					if strings.Contains(w, `label \"`+s.Want.Refused+`\"`) {
						naming++
					}
				}
				if naming == 0 || len(warned) > 2 {
					t.Errorf("warnings %q, want one naming %s, and at most one more from the sources of caddy-dicer's labels only", warned, s.Want.Refused)
				}
				for _, host := range s.hosts {
					if r := getPath(host, "/"); r.Err != nil || r.Status != http.StatusServiceUnavailable || r.Header.Get("X-Path") != "" {
						t.Errorf("%s: %s, want 503 not from the task", host, r)
					}
				}
				return
			}
			if len(warned) > 0 {
				t.Errorf("warned about, want routed: %s", warned[0])
			}
			paths := s.Want.Paths
			if len(paths) == 0 {
				paths = []string{""}
			}
			for _, host := range s.Want.Hosts {
				for _, p := range paths {
					wantPath := p + "/a/b"
					if s.Want.Strip {
						wantPath = "/a/b"
					}
					if r := getPath(host, p+"/a/b"); !r.Is(http.StatusOK, "hello from "+s.name+"\n") || r.Header.Get("X-Path") != wantPath {
						t.Errorf("%s%s/a/b: %s (X-Path %q), want 200 from %s with X-Path %q", host, p, r, r.Header.Get("X-Path"), s.name, wantPath)
					}
				}
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d label sets as services: created in %s, all routed and warned %s later; %s in all",
			len(sets), created.Sub(began).Round(time.Millisecond), routed.Sub(created).Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	})
}

// serviceSet is one label set as a service.
type serviceSet struct {
	labelsets.Case
	name  string   // the service's, and its tasks' helloserver's NAME
	hosts []string // the hosts its labels name, rewritten
	port  int
}

func newServiceSet(i int, c labelsets.Case) *serviceSet {
	s := &serviceSet{Case: c, name: dockertest.Name(fmt.Sprintf("ls%02d", i)), port: 80}
	rename := func(h string) string {
		return fmt.Sprintf("ls%02d-%s.foreign.swarm.test", i, strings.ReplaceAll(strings.ToLower(h), ".", "-"))
	}
	s.RenameHosts(rename, func(_, to string) { s.hosts = append(s.hosts, to) })
	for _, k := range []string{"caddy_ingress_network", "traefik.docker.network"} {
		if _, ok := s.Labels[k]; ok {
			s.Labels[k] = network
		}
	}
	if s.Want.Network != "" {
		s.Want.Network = network
	}
	if s.Want.Port != 0 {
		s.port = int(s.Want.Port)
	}
	return s
}

// args are the `docker service create` arguments of the set's service.
func (s *serviceSet) args() []string {
	args := []string{"service", "create", "--detach", "--no-resolve-image", "--quiet",
		"--name", s.name, "--network", network, "--replicas", "1",
		"--env", "PORT=" + strconv.Itoa(s.port), "--env", "NAME=" + s.name,
		"--label", "caddy-dicer.test.run=" + dockertest.RunID(), "--stop-grace-period", "5s"}
	for k, v := range s.Labels {
		args = append(args, "--label", k+"="+v)
	}
	return append(args, helloV1)
}
