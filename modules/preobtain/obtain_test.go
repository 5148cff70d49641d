package preobtain

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// fakeObtains records the names an obtainer asks certificates for.
type fakeObtains struct {
	mu    sync.Mutex
	names []string
	// hang, if set, says which names hang until release is closed.
	hang    func(name string) bool
	release chan struct{}
}

func (f *fakeObtains) get(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	f.mu.Lock()
	f.names = append(f.names, hello.ServerName)
	f.mu.Unlock()
	if f.hang != nil && f.hang(hello.ServerName) {
		<-f.release
	}
	if hello.Conn == nil || hello.Conn.RemoteAddr() == nil {
		panic("certmagic logs the hello's remote address: it needs one")
	}
	if strings.HasPrefix(hello.ServerName, "fail.") {
		return nil, fmt.Errorf("the CA refused %s", hello.ServerName)
	}
	return &tls.Certificate{}, nil
}

func (f *fakeObtains) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names)
}

// obtainerFor runs an obtainer of p with a fake certificate source, and
// stops it when the test ends.
func obtainerFor(t *testing.T, p *fakePerm) *fakeObtains {
	t.Helper()
	return obtainerWith(t, p, new(fakeObtains))
}

// obtainerWith is obtainerFor with the fake f.
func obtainerWith(t *testing.T, p *fakePerm, f *fakeObtains) *fakeObtains {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	o := New(ctx, p, zap.NewNop())
	o.logger = zap.NewNop()
	o.getCert = f.get
	o.started = func() bool { return true }
	o.Start()
	t.Cleanup(o.Stop)
	return f
}

// TestObtainOnClaim_R7b_new_claims_only_allowed_ones_once: the hosts
// claimed at start and each host claimed later are obtained once each;
// wildcard patterns, hosts outside allow_suffix or the selector are never
// asked for; a host claimed again after losing its claim is asked again
// (Caddy then finds its certificate in cache or storage).
func TestObtainOnClaim_R7b_new_claims_only_allowed_ones_once(t *testing.T) {
	p := permFor(t, permSettings{suffix: "example.com", selector: "tenant=a"},
		claimant("shop", "shop.example.com", "tenant", "a"),
		claimant("wild", "*.w.example.com", "tenant", "a"),
		claimant("net", "shop.example.net", "tenant", "a"),
		claimant("evil", "evil.example.com", "tenant", "b"))
	c := p.cat
	f := obtainerFor(t, p)
	testkit.Eventually(t, 5*time.Second, "the host claimed at start obtained", func() bool {
		return slices.Equal(f.got(), []string{"shop.example.com"})
	})
	c.Put(claimant("blog", "blog.example.com, www.blog.example.com", "tenant", "a"))
	testkit.Eventually(t, 5*time.Second, "both hosts of the new claim obtained", func() bool { return len(f.got()) == 3 })
	c.Put(claimant("blog2", "blog.example.com", "tenant", "a")) // a second claim of a host: nothing new
	c.Delete("shop")
	c.Put(claimant("other", "other.example.org", "tenant", "a")) // outside allow_suffix
	c.Put(claimant("m1", "m1.example.com", "tenant", "a"))       // a marker: the scan after the changes above ran
	testkit.Eventually(t, 5*time.Second, "the first marker obtained", func() bool { return len(f.got()) == 4 })
	c.Put(claimant("shop", "shop.example.com", "tenant", "a")) // claimed again
	testkit.Eventually(t, 5*time.Second, "the host claimed again asked again", func() bool { return len(f.got()) == 5 })
	c.Put(claimant("m2", "m2.example.com", "tenant", "a"))
	testkit.Eventually(t, 5*time.Second, "the second marker obtained", func() bool { return len(f.got()) == 6 })
	got := f.got()
	slices.Sort(got[1:3])
	want := []string{"shop.example.com", "blog.example.com", "www.blog.example.com", "m1.example.com", "shop.example.com", "m2.example.com"}
	if !slices.Equal(got, want) {
		t.Fatalf("obtained %q, want %q", got, want)
	}
}

// TestObtainOnClaim_R7b_waits_for_the_config_to_run: nothing is obtained
// before Caddy runs the config (its listeners answer the CA's challenges).
func TestObtainOnClaim_R7b_waits_for_the_config_to_run(t *testing.T) {
	p := permFor(t, permSettings{}, claimant("shop", "shop.example.com"))
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	f := new(fakeObtains)
	o := New(ctx, p, zap.NewNop())
	o.logger, o.getCert = zap.NewNop(), f.get
	var running sync.Mutex
	isRunning := false
	o.started = func() bool { running.Lock(); defer running.Unlock(); return isRunning }
	o.Start()
	defer o.Stop()
	if testkit.Until(500*time.Millisecond, func() bool { return len(f.got()) > 0 }) {
		t.Fatal("obtained before the config runs")
	}
	running.Lock()
	isRunning = true
	running.Unlock()
	testkit.Eventually(t, 5*time.Second, "obtained once the config runs", func() bool { return len(f.got()) == 1 })
}

// TestObtainOnClaim_R7b_queue_overflow_retried: more new hosts than the
// queue holds are queued as room is made, none lost and none twice.
func TestObtainOnClaim_R7b_queue_overflow_retried(t *testing.T) {
	var insts []catalog.Instance
	for i := range obtainQueueCap + 2 {
		insts = append(insts, claimant(fmt.Sprintf("i%d", i), fmt.Sprintf("h%d.example.com", i)))
	}
	p := permFor(t, permSettings{}, insts...)
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	o := New(ctx, p, zap.NewNop())
	o.logger = zap.NewNop()
	seen := o.scan(map[string]struct{}{})
	if len(seen) != obtainQueueCap || o.queue.len() != obtainQueueCap {
		t.Fatalf("first scan: %d seen, %d queued; want the queue's %d", len(seen), o.queue.len(), obtainQueueCap)
	}
	o.queue.tryPop()
	o.queue.tryPop()
	seen = o.scan(seen)
	if len(seen) != obtainQueueCap+2 || o.queue.len() != obtainQueueCap {
		t.Fatalf("with room for 2: %d seen, %d queued; want %d, %d", len(seen), o.queue.len(), obtainQueueCap+2, obtainQueueCap)
	}
}

// TestObtainOnClaim_R7b_failed_name_backs_off_across_flaps: a name whose
// obtain failed is not ordered again when its label flaps (claim lost,
// claimed again), within its backoff; other names go on.
func TestObtainOnClaim_R7b_failed_name_backs_off_across_flaps(t *testing.T) {
	p := permFor(t, permSettings{}, claimant("bad", "fail.example.com"))
	c := p.cat
	f := obtainerFor(t, p)
	testkit.Eventually(t, 5*time.Second, "the failing host tried once", func() bool { return len(f.got()) == 1 })
	for i := range 3 {
		c.Delete("bad")
		marker := fmt.Sprintf("m%d.example.com", i)
		c.Put(claimant("m", marker)) // the scan after the loss ran once this is obtained
		testkit.Eventually(t, 5*time.Second, marker+" obtained", func() bool { return slices.Contains(f.got(), marker) })
		c.Put(claimant("bad", "fail.example.com"))
		marker = fmt.Sprintf("n%d.example.com", i)
		c.Put(claimant("n", marker)) // and the scan after the new claim
		testkit.Eventually(t, 5*time.Second, marker+" obtained", func() bool { return slices.Contains(f.got(), marker) })
	}
	n := 0
	for _, name := range f.got() {
		if name == "fail.example.com" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the failing name was ordered %d times over three flaps, want once (backoff %s): %q", n, obtainBackoffMin, f.got())
	}
}

// TestObtainOnClaim_R7b_backoff_grows_and_is_bounded: the backoff doubles
// up to its cap, and the names remembered are bounded.
func TestObtainOnClaim_R7b_backoff_grows_and_is_bounded(t *testing.T) {
	o := &Obtainer{failed: map[string]obtainFailure{}}
	var delays []time.Duration
	for range 9 {
		delays = append(delays, o.backOff("x").delay)
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour, time.Hour}
	if !slices.Equal(delays, want) {
		t.Errorf("backoffs %v, want %v", delays, want)
	}
	for i := range obtainBackoffNames + 100 {
		o.backOff(fmt.Sprintf("h%d", i))
	}
	if len(o.failed) > obtainBackoffNames {
		t.Errorf("%d names remembered, want at most %d", len(o.failed), obtainBackoffNames)
	}
}

// TestObtainOnClaim_R7b_one_tenant_never_waits_on_another: an instance's
// ten failing names ahead of another instance's new host delay it by at
// most one obtain each round: the queue serves the claiming instances in
// rotation, and one instance holds at most obtainPerClaimant names of it.
func TestObtainOnClaim_R7b_one_tenant_never_waits_on_another(t *testing.T) {
	var noisy []string
	for i := range 10 {
		noisy = append(noisy, fmt.Sprintf("fail%d.noisy.example.com", i))
	}
	p := permFor(t, permSettings{}, claimant("noisy", strings.Join(noisy, ", ")))
	c := p.cat
	f := obtainerFor(t, p)
	testkit.Eventually(t, 5*time.Second, "the noisy tenant's first name tried", func() bool { return len(f.got()) >= 1 })
	c.Put(claimant("quiet", "shop.quiet.example.com"))
	testkit.Eventually(t, 15*time.Second, "the quiet tenant's host obtained", func() bool {
		return slices.Contains(f.got(), "shop.quiet.example.com")
	})
	if i := slices.Index(f.got(), "shop.quiet.example.com"); i > 2 {
		t.Errorf("the quiet tenant's host was obtained after %d of the noisy tenant's names, want at most 2: %q", i, f.got())
	}

	q := newFairQueue()
	for i := range obtainPerClaimant + 5 {
		q.push("one", fmt.Sprintf("h%d", i))
	}
	if q.len() != obtainPerClaimant || !q.push("two", "x") {
		t.Errorf("one instance holds %d names of the queue, want %d, and another still gets in", q.len(), obtainPerClaimant)
	}
}

// TestObtainOnClaim_R7b_obtain_timeout: the obtainer waits at most
// obtain_timeout for one certificate, then goes on to the next host: a CA
// that never answers for one name delays the others by the timeout, not
// forever.
func TestObtainOnClaim_R7b_obtain_timeout(t *testing.T) {
	p := permFor(t, permSettings{timeout: 100 * time.Millisecond},
		claimant("a", "hang.example.com"), claimant("b", "next.example.com"))
	f := new(fakeObtains)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f.hang = func(name string) bool { return name == "hang.example.com" }
	f.release = release
	obtainerWith(t, p, f)
	testkit.Eventually(t, 10*time.Second, "the next host obtained while the first hangs", func() bool {
		got := f.got()
		return len(got) == 2 && got[1] == "next.example.com"
	})
}

// permSettings are what a fake permission allows: names under suffix
// (if set) that an instance matching selector (if set) claims exactly.
type permSettings struct {
	suffix, selector string
	timeout          time.Duration
}

// fakePerm is a permission over a catalog of its own.
type fakePerm struct {
	cat *catalog.Catalog
	permSettings
	sel *selector.Selector
}

func permFor(t *testing.T, s permSettings, instances ...catalog.Instance) *fakePerm {
	t.Helper()
	p := &fakePerm{cat: catalog.New(catalog.Options{}), permSettings: s}
	p.cat.Replace(instances)
	if s.selector != "" {
		sel, err := selector.Parse(s.selector)
		if err != nil {
			t.Fatal(err)
		}
		p.sel = &sel
	}
	return p
}

func (p *fakePerm) Snapshot() *catalog.Snapshot { return p.cat.Snapshot() }

func (p *fakePerm) Decide(host string) error {
	if p.suffix != "" && !strings.HasSuffix(host, "."+p.suffix) && host != p.suffix {
		return errors.New("not under the suffix")
	}
	if p.cat.Snapshot().ClaimOf(host, p.sel) != catalog.ClaimedExactly {
		return errors.New("not claimed")
	}
	return nil
}

func (p *fakePerm) ObtainTimeout() time.Duration {
	if p.timeout == 0 {
		return time.Minute
	}
	return p.timeout
}

func claimant(name, hosts string, labels ...string) catalog.Instance {
	l := map[string]string{"caddy.host": hosts}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return catalog.Instance{ID: name, Name: name, Labels: l, State: catalog.StateStopped}
}
