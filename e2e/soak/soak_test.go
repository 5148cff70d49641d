//go:build soak && linux

package soak

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/internal/fleet"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

const (
	// zone is BIND's zone, where the tenants' hosts get records and
	// certificates; deploys claim hosts under deployDomain, outside it.
	zone         = "soak.test"
	deployDomain = "deploy.test"
	engineDomain = "engine.test"
	recordIP     = "203.0.113.7"
	// bindSubnet is the soak's 10.216.0.x/30 for testkit.StartBIND
	// (the dns tests use 0 and 1).
	bindSubnet = 7
	// dnsGrace is dns_records' grace: a relabelled host's records go
	// this long after its last claim.
	dnsGrace = 2 * time.Second
	// standbyAfter is the Engine containers' caddy.standby_after.
	standbyAfter = 3 * time.Second
	// skew is how far ahead the skewed Caddy's clock runs.
	skew = 5 * time.Minute
	// tenants redeployed under another host every relabelEvery, each
	// among tenantHosts names: the DNS records and certificates follow.
	tenants, tenantHosts = 3, 4
	// maxOrdersPerDomain is the permission's budget under zone: below
	// the tenants' tenants*tenantHosts names, so that some are refused.
	maxOrdersPerDomain = 8
	// deployBatch is how many instances a deploy worker runs before it
	// sets their weight with one POST.
	deployBatch = 10
)

// soakConfig is the Caddyfile of a Caddy of the soak: the shared storage,
// metrics, the test daemon's route (by caddy.host) with dicer_weighted,
// the Engine's route (this run's containers only) with healing, on-demand
// TLS from Caddy's local CA with `permission dicer` pre-issuing claimed
// hosts under budgets and publishing their records to BIND.
func soakConfig(storage, socket string, bind testkit.BIND) func(p *fleetCaddy) string {
	return func(p *fleetCaddy) string {
		return fmt.Sprintf(`{
	admin 127.0.0.1:%[1]d
	storage file_system %[2]s
	http_port %[3]d
	https_port %[4]d
	default_bind 127.0.0.1
	persist_config off
	skip_install_trust
	local_certs
	metrics
	auto_https disable_redirects
	on_demand_tls {
		permission dicer {
			address unix:%[5]s
			allow_suffix %[6]s
			obtain_on_claim
			max_orders_per_domain %[7]d
			max_orders_per_instance 1
			dns_records {
				provider rfc2136 {
					server %[8]s:53
					key_name %[9]s
					key %[10]s
				}
				zone %[6]s
				address %[11]s
				grace %[12]s
			}
		}
	}
}

:%[3]d {
	reverse_proxy {
		dynamic dicer {
			address unix:%[5]s
			port 8080
		}
		lb_policy dicer_weighted
	}
}

:%[13]d {
	reverse_proxy {
		dynamic docker %[14]s=%[15]s {
			port 8080
			heal_max_restarts 1000
		}
		flush_interval -1
	}
}

https:// {
	tls {
		on_demand
	}
	reverse_proxy {
		dynamic dicer {
			address unix:%[5]s
			port 8080
		}
	}
}
`, p.admin, storage, p.http, p.https, socket, zone, maxOrdersPerDomain, bind.Server, bind.KeyName, bind.Key,
			recordIP, dnsGrace, p.engine, dockertest.RunLabel, dockertest.RunID())
	}
}

// counts are the soak's tallies, printed at the end.
type counts struct {
	deploys, deployErrs, routeErrs, weights, weightErrs, relabels, relabelErrs atomic.Int64
	heals, healErrs, wakes, wakeErrs, skewLeases                               atomic.Int64
	mu                                                                         sync.Mutex
	firstErrs                                                                  map[*atomic.Int64][]string
}

// fail counts an error in n and keeps the first three of each kind.
func (c *counts) fail(n *atomic.Int64, err error) {
	n.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstErrs == nil {
		c.firstErrs = map[*atomic.Int64][]string{}
	}
	if len(c.firstErrs[n]) < 3 {
		c.firstErrs[n] = append(c.firstErrs[n], err.Error())
	}
}

// errors lists the first errors of each kind.
func (c *counts) errors() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, k := range []struct {
		name string
		n    *atomic.Int64
	}{{"deploy", &c.deployErrs}, {"route", &c.routeErrs}, {"weight", &c.weightErrs}, {"relabel", &c.relabelErrs}, {"heal", &c.healErrs}, {"wake", &c.wakeErrs}} {
		for _, e := range c.firstErrs[k.n] {
			fmt.Fprintf(&b, "\n  %s: %s", k.name, e)
		}
	}
	return b.String()
}

// TestSoak_a_month_in_ten_minutes is issue 42's soak: a month of a busy
// operator against three Caddys sharing one storage, the test daemon and
// the Engine. It samples after the first tenth of the deploys and at the
// end, prints the table, and fails on a figure grown past 1.2 times (and
// its slack) or a function that no longer works at the end.
func TestSoak_a_month_in_ten_minutes(t *testing.T) {
	began := time.Now()
	pl := planFromEnv(t)
	t.Logf("plan: scale %.2f: %d deploys (%d at once, %d workers), %d Caddy restarts, storage away %s halfway, tenants relabelled every %s, an Engine heal cycle and wake every %s; deploys paced over %s at least, the first sample %s in at the earliest",
		pl.scale, pl.deploys, pl.window, pl.workers, pl.restarts, pl.outage, pl.relabelEvery, pl.engineEvery, pl.least, pl.warmup)
	// The table again once every log is printed (this cleanup, the first
	// registered, runs last), so that it ends the output.
	var report string
	t.Cleanup(func() {
		if report != "" && t.Failed() {
			t.Logf("the soak's figures again:\n%s", report)
		}
	})
	r := &reaper{}
	root := t.TempDir()
	// t.TempDir's parent is this test's own (BIND's folder is in it too).
	r.add(func() { _ = os.RemoveAll(filepath.Dir(root)) })
	storage := filepath.Join(root, "storage")
	if err := os.MkdirAll(storage, 0o755); err != nil {
		t.Fatal(err)
	}
	bind := testkit.StartBIND(t, bindSubnet, zone)
	if !bindNamespaceExists(bindSubnet) {
		t.Fatal("BIND's namespace is not where the soak's reaper looks for it (testkit.StartBIND's names changed): update bindNamespace")
	}
	r.add(bindUndo(bindSubnet))
	takeOverSignals(t, r)
	cli := dockertest.Client(t)
	d := startTestDaemon(t, r, root)
	config := soakConfig(storage, d.socket, bind)
	caddys := []*fleetCaddy{newFleetCaddy(t, r, "a", root, config), newFleetCaddy(t, r, "b", root, config), newFleetCaddy(t, r, "c", root, config)}
	skewed := newSkewedCaddy(storage)
	var c counts

	ctx, stop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	var deployed atomic.Int64
	loop := func(f func()) { loops.Add(1); go func() { defer loops.Done(); f() }() }

	// The deploys, in batches of deployBatch: each a new instance with a
	// host of its own, routed by a Caddy chosen at random, a runtime
	// weight set on the batch's instances through that Caddy (one POST
	// by the batch's label: one storage lock per batch, where the file
	// storage's lock, polled every second, would serialise one per
	// instance), a lease on each written by the skewed Caddy; each
	// removed pl.window deploys later.
	// The deploys' addresses come from the soak, 127.0.0.150 to .254,
	// each back once its instance is removed: the daemon's own choice
	// (the first free from .100) is made per request, and runs at once
	// got the same address (bind: address already in use). The tenants
	// and the checks take the daemon's choice, below .150.
	ips := make(chan string, 105)
	for i := 150; i <= 254; i++ {
		ips <- fmt.Sprintf("127.0.0.%d", i)
	}
	var ipOf sync.Map // instance name -> its address
	var idOf sync.Map // instance name -> its ID
	live := make(chan string, pl.window)
	for w := range pl.workers {
		loop(func() {
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for ctx.Err() == nil {
				n := deployed.Add(deployBatch)
				// Paced: batch n is not begun before its share of pl.least.
				if due := began.Add(time.Duration(float64(pl.least) * float64(n-deployBatch) / float64(pl.deploys))); time.Until(due) > 0 {
					select {
					case <-time.After(time.Until(due)):
					case <-ctx.Done():
						return
					}
				}
				batch := fmt.Sprintf("b%d", n/deployBatch)
				// The batch's instances are run at once: the daemon takes
				// a fraction of a second to start each one's process.
				var names []string
				var namesMu sync.Mutex
				var runs sync.WaitGroup
				for i := range deployBatch {
					name := fmt.Sprintf("d%d", n-deployBatch+1+int64(i))
					var ip string
					select {
					case ip = <-ips:
					case <-ctx.Done():
						continue
					}
					runs.Go(func() {
						id, err := d.runAt(name, ip, map[string]string{"caddy.host": name + "." + deployDomain, "soak.batch": batch})
						if err != nil {
							ips <- ip
							c.fail(&c.deployErrs, err)
							return
						}
						ipOf.Store(name, ip)
						idOf.Store(name, id)
						c.deploys.Add(1)
						namesMu.Lock()
						names = append(names, name)
						namesMu.Unlock()
						if err := skewed.use(ctx, id, false); err == nil {
							c.skewLeases.Add(1)
						}
					})
				}
				runs.Wait()
				p := caddys[rng.IntN(len(caddys))]
				p.mu.RLock()
				// Each instance routed within 10 s; after one that is not,
				// the batch's others get 2 s each, so that a Caddy that
				// stopped following costs the soak little time.
				routed, within := len(names), 10*time.Second
				for _, name := range names {
					host := name + "." + deployDomain
					var status int
					var err error
					if !testkit.Until(within, func() bool { status, _, err = p.get(p.http, host, "/"); return err == nil && status == 200 }) {
						c.fail(&c.routeErrs, fmt.Errorf("caddy %s (up %s) does not route %s within %s: %d %v",
							p.slot, time.Since(p.startedAt).Round(100*time.Millisecond), host, within, status, err))
						routed, within = routed-1, 2*time.Second
					}
				}
				if routed > 0 {
					status, body := p.adminPost("/dicer/weight", fmt.Sprintf(`{"selector": "soak.batch=%s", "weight": %d}`, batch, 1+rng.IntN(100)))
					if status == 200 {
						c.weights.Add(int64(len(names)))
					} else {
						c.fail(&c.weightErrs, fmt.Errorf("weight on batch %s through %s: %d %s", batch, p.slot, status, strings.TrimSpace(body)))
					}
				}
				p.mu.RUnlock()
				var rms sync.WaitGroup
				for _, name := range names {
					for {
						select {
						case live <- name:
						default:
							old := <-live
							rms.Go(func() {
								if err := d.rm(old); err != nil {
									c.fail(&c.deployErrs, err)
									return // its address stays taken
								}
								if ip, ok := ipOf.LoadAndDelete(old); ok {
									ips <- ip.(string)
								}
								if id, ok := idOf.LoadAndDelete(old); ok {
									_ = skewed.gone(ctx, id.(string))
								}
							})
							continue
						}
						break
					}
				}
				rms.Wait()
			}
		})
	}

	// The tenants: each redeployed every pl.relabelEvery under the next of
	// its hosts in zone: records written and removed, certificates
	// pre-issued until the budget refuses.
	loop(func() {
		gen := 0
		for ctx.Err() == nil {
			for k := range tenants {
				name := fmt.Sprintf("t%d", k)
				_ = d.rm(name)
				host := fmt.Sprintf("t%d-%d.%s", k, gen%tenantHosts, zone)
				if _, err := d.run(name, map[string]string{"caddy.host": host}); err != nil {
					c.fail(&c.relabelErrs, err)
					continue
				}
				c.relabels.Add(1)
			}
			gen++
			select {
			case <-ctx.Done():
			case <-time.After(pl.relabelEvery):
			}
		}
	})

	// The Engine: a container that sleeps (standby_after 3s) woken every
	// pl.engineEvery, and a heal cycle: a container broken and restarted
	// by Caddy, then removed.
	sleeper, err := engineContainer(ctx, cli, "soak-sleeper", map[string]string{"caddy.host": "sleeper." + engineDomain,
		"caddy.standby_after": standbyAfter.String()}, dockertest.Options{})
	if err != nil {
		t.Fatalf("the Engine's sleeper: %v", err)
	}
	_ = sleeper
	loop(func() {
		for i := 0; ctx.Err() == nil; i++ {
			p := caddys[i%len(caddys)]
			p.mu.RLock()
			status, _, err := p.get(p.engine, "sleeper."+engineDomain, "/")
			p.mu.RUnlock()
			if err != nil || status != 200 {
				c.fail(&c.wakeErrs, fmt.Errorf("waking the sleeper through %s: %d %v", p.slot, status, err))
			} else {
				c.wakes.Add(1)
			}
			if err := healCycle(ctx, cli, fmt.Sprintf("soak-heal-%d", i)); err != nil {
				if ctx.Err() == nil {
					c.fail(&c.healErrs, err)
				}
			} else {
				c.heals.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(pl.engineEvery):
			}
		}
	})

	// The conductor: restarts, the outage, and the two samples, one at a
	// time, by the deploys' progress.
	var first, end sample
	var outageTook time.Duration
	tenth, restartEvery, outageAt := int64(pl.deploys/10), int64(pl.deploys/pl.restarts), int64(pl.deploys/2)
	nextRestart, restarts, outageDone, sampled := restartEvery, 0, false, false
	for {
		n := deployed.Load()
		over := time.Since(began) > pl.budget
		switch {
		case over && !sampled:
			stop()
			loops.Wait()
			t.Fatalf("the soak's budget of %s is spent at %d of %d deploys, before the first tenth", pl.budget, n, pl.deploys)
		case over:
			end = take(storage, bind, caddys)
			t.Errorf("the soak's budget of %s is spent: the end sampled at %d of %d deploys", pl.budget, n, pl.deploys)
		case !sampled && n >= tenth && time.Since(began) >= pl.warmup:
			first, sampled = take(storage, bind, caddys), true
			t.Logf("first tenth sampled at %d deploys, %s in", n, time.Since(began).Round(time.Second))
		case n >= int64(pl.deploys):
			end = take(storage, bind, caddys)
			t.Logf("end sampled at %d deploys, %s in", n, time.Since(began).Round(time.Second))
		case !outageDone && n >= outageAt:
			outageTook = storageOutage(t, storage, pl.outage)
			outageDone = true
			continue
		case n >= nextRestart && restarts < pl.restarts:
			caddys[restarts%len(caddys)].restart(t)
			restarts++
			nextRestart += restartEvery
			continue
		default:
			time.Sleep(20 * time.Millisecond) // the deploys' progress is polled
			continue
		}
		if !end.at.IsZero() {
			break
		}
	}
	stop()
	loops.Wait()
	soakTook := time.Since(began)

	// Every function still works at the end.
	var broken []string
	check := func(what string, err error) {
		if err != nil {
			broken = append(broken, what+": "+err.Error())
		}
	}
	check("a weight is set and obeyed fleet-wide", checkWeight(d, caddys))
	check("a live lease holds a container under requests", checkLiveLease(t, cli, caddys))
	check("a skewed Caddy's lease holds a container no longer than one lease TTL", checkSkewedLease(t, cli, caddys, skewed))
	check("a released host's records go", checkReleasedRecords(d, bind, caddys))
	check("a broken container is healed", healCycle(context.Background(), cli, "soak-heal-final"))
	check("a budget refuses", checkBudget(d, caddys))

	fs := figures(first, end, caddys)
	restartsBy := make([]string, 0, len(caddys))
	for _, p := range caddys {
		restartsBy = append(restartsBy, fmt.Sprintf("%s %d", p.slot, p.restarts))
	}
	t.Logf("soak: %s (samples %s apart), checks %s; storage away %s\n"+
		"deploys %d (errors %d, not routed %d), weights set %d (refused %d), relabels %d (errors %d), skewed leases %d\n"+
		"restarts %s; Engine: wakes %d (failed %d), heal cycles %d (failed %d); first errors:%s\n\n%s",
		soakTook.Round(time.Second), end.at.Sub(first.at).Round(time.Second), (time.Since(began) - soakTook).Round(time.Second), outageTook.Round(100*time.Millisecond),
		c.deploys.Load(), c.deployErrs.Load(), c.routeErrs.Load(), c.weights.Load(), c.weightErrs.Load(), c.relabels.Load(), c.relabelErrs.Load(), c.skewLeases.Load(),
		strings.Join(restartsBy, ", "), c.wakes.Load(), c.wakeErrs.Load(), c.heals.Load(), c.healErrs.Load(), c.errors(), table(fs))
	report = table(fs)
	for _, f := range fs {
		if f.grew() {
			t.Errorf("grew: %s from %.0f after the first tenth to %.0f at the end (limit: %.1f times, or +%.0f)", f.name, f.first, f.end, flatRatio, f.slack)
		}
	}
	for _, b := range broken {
		t.Errorf("broken at the end: %s", b)
	}
}

// storageOutage takes the shared storage away for d (the folder moved
// and a file in its place, so that every read and write fails; root
// ignores permissions) and brings it back; it returns how long it was
// away.
func storageOutage(t *testing.T, storage string, d time.Duration) time.Duration {
	t.Helper()
	if err := os.Rename(storage, storage+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(storage, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	away := time.Now()
	time.Sleep(d) // the outage itself
	if err := os.Remove(storage); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(storage+".away", storage); err != nil {
		t.Fatal(err)
	}
	return time.Since(away)
}

// skewedCaddy is a Caddy of the fleet whose clock runs skew ahead: a Go
// program's clock cannot be moved from outside (libfaketime does not
// reach it), so its leases are written into the storage as it would
// write them, through the fleet's own code, with its times.
type skewedCaddy struct{ f *fleet.Fleet }

func newSkewedCaddy(storage string) *skewedCaddy {
	f := fleet.New(fleet.Self{ID: "soak-skewed-caddy", Host: "skewed"})
	f.SetStorage(&certmagic.FileStorage{Path: storage})
	return &skewedCaddy{f}
}

// use writes its lease on instance as after routing a request to it:
// last use now (its now), in flight or not, renewed every third of
// standby_after.
func (s *skewedCaddy) use(ctx context.Context, instance string, inFlight bool) error {
	now := time.Now().Add(skew)
	l := fleet.Lease{LastUse: now, Expires: now.Add(fleet.LeaseTTL(fleet.LeaseEvery(standbyAfter)))}
	if inFlight {
		l.InFlight = 1
	}
	return s.f.Publish(ctx, instance, l)
}

// gone is what a live Caddy does when the daemon removed an instance it
// leased: its publisher removes the instance's lease folder (R5m).
func (s *skewedCaddy) gone(ctx context.Context, instance string) error {
	return s.f.Forget(ctx, instance)
}

// healCycle starts a container with a health check and caddy.heal=1s,
// breaks it (POST /health/bad), waits until Caddy restarts it (its start
// time changes) and removes it.
func healCycle(ctx context.Context, cli client.APIClient, name string) error {
	c, err := engineContainer(ctx, cli, name, map[string]string{"caddy.host": name + "." + engineDomain, "caddy.heal": "1s"},
		dockertest.Options{Health: dockertest.HealthCheck(200*time.Millisecond, 0), Ports: []string{"127.0.0.1::8080"}})
	defer func() {
		if c.ID != "" {
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = cli.ContainerRemove(rctx, c.ID, container.RemoveOptions{Force: true})
		}
	}()
	if err != nil {
		return err
	}
	inspect := func() (container.InspectResponse, error) {
		ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return cli.ContainerInspect(ictx, c.ID)
	}
	var started, addr string
	if !testkit.UntilEvery(20*time.Second, 100*time.Millisecond, func() bool {
		in, err := inspect()
		if err != nil || in.State == nil || in.State.Health == nil || in.State.Health.Status != container.Healthy {
			return false
		}
		started = in.State.StartedAt
		if b := in.NetworkSettings.Ports["8080/tcp"]; len(b) > 0 {
			addr = net.JoinHostPort(b[0].HostIP, b[0].HostPort)
		}
		return addr != ""
	}) {
		return fmt.Errorf("%s not healthy within 20s", name)
	}
	if code, _, err := dockertest.Post(ctx, addr, "/health/bad"); err != nil || code != 200 {
		return fmt.Errorf("breaking %s: %d %v", name, code, err)
	}
	if !testkit.UntilEvery(30*time.Second, 100*time.Millisecond, func() bool {
		in, err := inspect()
		return err == nil && in.State != nil && in.State.StartedAt != started
	}) {
		return fmt.Errorf("%s, broken, not restarted within 30s", name)
	}
	return nil
}

// checkWeight: two instances of one host; a weight of 0 set on one
// through Caddy a; every Caddy sends all of 20 requests to the other
// within 3 s.
func checkWeight(d *testDaemon, caddys []*fleetCaddy) error {
	host := "weight." + deployDomain
	for _, n := range []string{"wa", "wb"} {
		if _, err := d.run(n, map[string]string{"caddy.host": host}); err != nil {
			return err
		}
	}
	defer func() { _ = d.rm("wa"); _ = d.rm("wb") }()
	for _, p := range caddys {
		if !testkit.Until(10*time.Second, func() bool { return len(p.served(p.http, host, 10)) == 2 }) {
			return fmt.Errorf("caddy %s does not route to both wa and wb", p.slot)
		}
	}
	if status, body := caddys[0].adminPost("/dicer/weight", `{"instance": "wa", "weight": 0}`); status != 200 {
		return fmt.Errorf("POST /dicer/weight through a: %d %s", status, strings.TrimSpace(body))
	}
	for _, p := range caddys {
		var got map[string]int
		if !testkit.Until(3*time.Second, func() bool { got = p.served(p.http, host, 20); return got["wb"] == 20 }) {
			return fmt.Errorf("caddy %s, 3 s after the weight 0 on wa: %v", p.slot, got)
		}
	}
	return nil
}

// downOrGone reports whether the container is not running (on standby).
func notRunning(cli client.APIClient, id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	in, err := cli.ContainerInspect(ctx, id)
	return err == nil && in.State != nil && (!in.State.Running || in.State.Paused)
}

// checkLiveLease: a container with standby_after 3s routed once through
// b, then a 5 s stream through a: it stays up throughout (a's lease
// holds it against b's idle clock), the stream is whole, and it goes on
// standby after.
func checkLiveLease(t *testing.T, cli client.APIClient, caddys []*fleetCaddy) error {
	host := "hold." + engineDomain
	c := dockertest.Start(t, cli, dockertest.Options{Name: "soak-hold", Labels: map[string]string{"caddy.host": host, "caddy.standby_after": standbyAfter.String()}})
	a, b := caddys[0], caddys[1]
	for _, p := range []*fleetCaddy{a, b} {
		if !testkit.Until(15*time.Second, func() bool { s, _, err := p.get(p.engine, host, "/"); return err == nil && s == 200 }) {
			return fmt.Errorf("caddy %s does not route %s", p.slot, host)
		}
	}
	done := make(chan error, 1)
	go func() {
		status, body, err := a.get(a.engine, host, "/drip?n=25&every=200ms")
		if err == nil && (status != 200 || body != strings.Repeat("x", 25)) {
			err = fmt.Errorf("the stream through a: %d, %d of 25 bytes", status, len(body))
		}
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
			if !testkit.UntilEvery(15*time.Second, 100*time.Millisecond, func() bool { return notRunning(cli, c.ID) }) {
				return fmt.Errorf("not on standby within 15 s after the stream")
			}
			return nil
		case <-time.After(100 * time.Millisecond):
			if notRunning(cli, c.ID) {
				return fmt.Errorf("put on standby during a's stream")
			}
		}
	}
}

// checkSkewedLease: a container with standby_after 3s routed once
// through a, and a lease on it with a request in flight from the skewed
// Caddy, written once (that Caddy then stops renewing, as one that ends
// its requests or dies): it goes on standby within standby_after plus one
// lease TTL (and 3 s of polling and stopping), not the skew.
func checkSkewedLease(t *testing.T, cli client.APIClient, caddys []*fleetCaddy, skewed *skewedCaddy) error {
	host := "skew." + engineDomain
	c := dockertest.Start(t, cli, dockertest.Options{Name: "soak-skew", Labels: map[string]string{"caddy.host": host, "caddy.standby_after": standbyAfter.String()}})
	a := caddys[0]
	if !testkit.Until(15*time.Second, func() bool { s, _, err := a.get(a.engine, host, "/"); return err == nil && s == 200 }) {
		return fmt.Errorf("caddy a does not route %s", host)
	}
	if err := skewed.use(context.Background(), c.ID, true); err != nil {
		return fmt.Errorf("writing the skewed lease: %w", err)
	}
	written := time.Now()
	bound := standbyAfter + fleet.LeaseTTL(fleet.LeaseEvery(standbyAfter)) + 3*time.Second
	if !testkit.UntilEvery(bound, 100*time.Millisecond, func() bool { return notRunning(cli, c.ID) }) {
		return fmt.Errorf("still up %s after the skewed lease (%s ahead) was written once", time.Since(written).Round(100*time.Millisecond), skew)
	}
	return nil
}

// checkReleasedRecords: an instance claims a new host in zone: its A
// record appears at BIND; the instance goes: the record goes within the
// grace period and 8 s.
func checkReleasedRecords(d *testDaemon, bind testkit.BIND, _ []*fleetCaddy) error {
	host := "released." + zone
	dig := func() []string {
		got, _ := bindDig(bind, host, "A")
		return got
	}
	if _, err := d.run("released", map[string]string{"caddy.host": host}); err != nil {
		return err
	}
	if !testkit.UntilEvery(10*time.Second, 100*time.Millisecond, func() bool { return slices.Equal(dig(), []string{recordIP}) }) {
		_ = d.rm("released")
		return fmt.Errorf("no A record for %s within 10 s of its claim: %q", host, dig())
	}
	if err := d.rm("released"); err != nil {
		return err
	}
	if !testkit.UntilEvery(dnsGrace+8*time.Second, 100*time.Millisecond, func() bool { return len(dig()) == 0 }) {
		return fmt.Errorf("the A record of %s still there %s after its instance went: %q", host, dnsGrace+8*time.Second, dig())
	}
	return nil
}

// checkBudget: one instance claims two new hosts in zone under
// max_orders_per_instance 1: a Caddy refuses a certificate for at least
// one of them (the handshake fails) and counts the refusal.
func checkBudget(d *testDaemon, caddys []*fleetCaddy) error {
	refused := func() float64 {
		sum := 0.0
		for _, p := range caddys {
			v, _ := metricValue(p.metrics(), "caddy_dicer_certificate_budget_refused_total")
			sum += v
		}
		return sum
	}
	before := refused()
	hosts := []string{"budget1." + zone, "budget2." + zone}
	if _, err := d.run("budget", map[string]string{"caddy.host": strings.Join(hosts, ",")}); err != nil {
		return err
	}
	defer func() { _ = d.rm("budget") }()
	a := caddys[0]
	handshake := func(host string) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", a.https),
			&tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // Caddy's local CA; only whether it hands one out counts
		if err == nil {
			conn.Close()
		}
		return err
	}
	var results []string
	failed := false
	if !testkit.Until(15*time.Second, func() bool {
		results, failed = results[:0], false
		for _, h := range hosts {
			err := handshake(h)
			failed = failed || err != nil
			results = append(results, fmt.Sprintf("%s: %v", h, err))
		}
		return failed && refused() > before
	}) {
		return fmt.Errorf("no refusal counted (%.0f before, %.0f after) or no handshake refused: %s", before, refused(), strings.Join(results, "; "))
	}
	return nil
}

// bindDig asks BIND for name's records of type, as `dig +short` prints
// them.
func bindDig(b testkit.BIND, name, typ string) ([]string, error) {
	out, err := exec.Command("dig", "@"+b.Server, name, typ, "+short", "+time=1", "+tries=1").Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
