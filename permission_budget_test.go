package caddydicer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/budget"
	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
)

// R7d: by default a registered domain gets 20 new names an hour and an
// instance 10, whatever else allows them: the 21st name under example.com
// (each claimed by an instance of its own) and one instance's 11th name
// (each under a domain of its own) are refused as permission denied, with
// the metric and one log line per spent budget; a name allowed before is
// allowed again; another tenant's domain is unaffected.
func TestPermission_R7d_budgets_refuse_before_any_order(t *testing.T) {
	var insts []catalog.Instance
	for i := range defaultOrdersPerDomain + 2 {
		insts = append(insts, claimant(fmt.Sprint("shop", i), fmt.Sprintf("s%d.example.com", i)))
	}
	var many []string
	for i := range defaultOrdersPerInstance + 1 {
		many = append(many, fmt.Sprintf("site.d%d.example", i))
	}
	insts = append(insts, claimant("greedy", joinHosts(many)), claimant("other", "other.example.net"))
	p := permissionFor(t, hostPermission{}, insts...)
	p.conn = connection.Fixture{Kind: "docker", Address: t.Name(), Catalog: p.conn.Catalog()}.Conn()
	core, logs := observer.New(zapcore.WarnLevel)
	p.logger = zap.New(core)
	allowed := func(name string) error { return p.CertificateAllowed(context.Background(), name) }
	// The counters are the process's (one series per connection's kind
	// and address, as Caddy's metrics registry keeps them across configs):
	// a run of the test counts what it adds to them, so that -count=N
	// passes too.
	refused := func(b string) float64 {
		return testutil.ToFloat64(p.conn.BudgetRefused(b))
	}
	domainBefore, instanceBefore := refused(budget.Domain), refused(budget.Instance)

	for i := range defaultOrdersPerDomain {
		if err := allowed(fmt.Sprintf("s%d.example.com", i)); err != nil {
			t.Fatalf("name %d under example.com: %v", i, err)
		}
	}
	for i := range 2 {
		err := allowed(fmt.Sprintf("s%d.example.com", defaultOrdersPerDomain+i))
		if !errors.Is(err, caddytls.ErrPermissionDenied) || err != errBudget[budget.Domain] {
			t.Fatalf("name %d under example.com: %v, want the domain budget's refusal", defaultOrdersPerDomain+i+1, err)
		}
	}
	if err := allowed("s0.example.com"); err != nil {
		t.Fatalf("a name allowed before: %v", err)
	}
	for i, name := range many {
		err := allowed(name)
		if want := i < defaultOrdersPerInstance; (err == nil) != want {
			t.Fatalf("greedy's name %d: %v, allowed want %v", i+1, err, want)
		}
	}
	if err := allowed("other.example.net"); err != nil {
		t.Fatalf("another tenant's name: %v", err)
	}
	if d, i := refused(budget.Domain)-domainBefore, refused(budget.Instance)-instanceBefore; d != 2 || i != 1 {
		t.Errorf("refusals counted: domain %v, instance %v; want 2 and 1", d, i)
	}
	lines := logs.FilterMessageSnippet("issuance budget").All()
	if len(lines) != 2 || lines[0].ContextMap()["of"] != "example.com" || lines[1].ContextMap()["of"] != "greedy" {
		t.Fatalf("log lines %v, want one for example.com and one for greedy", lines)
	}
}

func joinHosts(hosts []string) string {
	out := ""
	for i, h := range hosts {
		if i > 0 {
			out += ","
		}
		out += h
	}
	return out
}

// R7d: a certificate in Caddy's storage is loaded, not ordered: it is not
// charged, so a spent budget does not refuse it; 0 is no limit.
func TestPermission_R7d_stored_certificates_and_no_limit(t *testing.T) {
	zero := 0
	one := 1
	p := permissionFor(t, hostPermission{issuanceBudget: issuanceBudget{MaxOrdersPerDomain: &one, MaxOrdersPerInstance: &zero}},
		claimant("a", "a.example.com,b.example.com,c.example.com"))
	dir := t.TempDir()
	p.setStorage(&certmagic.FileStorage{Path: dir})
	crt := filepath.Join(dir, certmagic.StorageKeys.SiteCert("acme.example-directory", "c.example.com"))
	if err := os.MkdirAll(filepath.Dir(crt), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crt, []byte("stored"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.CertificateAllowed(ctx, "c.example.com"); err != nil {
		t.Fatalf("the stored name before any order: %v", err)
	}
	if err := p.CertificateAllowed(ctx, "a.example.com"); err != nil {
		t.Fatalf("the domain's one order: %v", err)
	}
	if err := p.CertificateAllowed(ctx, "b.example.com"); err != errBudget[budget.Domain] {
		t.Fatalf("a second name: %v, want the domain budget's refusal", err)
	}
	if err := p.CertificateAllowed(ctx, "c.example.com"); err != nil {
		t.Fatalf("the stored name with the budget spent: %v", err)
	}
}

// countingStorage counts the storage calls the budget makes.
type countingStorage struct {
	certmagic.Storage
	lists, exists atomic.Int32
}

func (s *countingStorage) List(ctx context.Context, prefix string, recursive bool) ([]string, error) {
	s.lists.Add(1)
	return s.Storage.List(ctx, prefix, recursive)
}

func (s *countingStorage) Exists(ctx context.Context, key string) bool {
	s.exists.Add(1)
	return s.Storage.Exists(ctx, key)
}

// R7d: a refused name repeated (a client's retries, a scanner's) costs
// no storage call: it was looked for once, when first refused, and not
// again within budget.RefusalMemory. Each new name still is.
func TestPermission_R7d_repeated_refusal_makes_no_storage_call(t *testing.T) {
	zero, one := 0, 1
	p := permissionFor(t, hostPermission{issuanceBudget: issuanceBudget{MaxOrdersPerDomain: &one, MaxOrdersPerInstance: &zero}},
		claimant("a", "a.example.com,b.example.com,c.example.com"))
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, certmagic.StorageKeys.CertsPrefix("acme.example-directory")), 0o700); err != nil {
		t.Fatal(err)
	}
	storage := &countingStorage{Storage: &certmagic.FileStorage{Path: dir}}
	p.setStorage(storage)
	ctx := context.Background()
	if err := p.CertificateAllowed(ctx, "a.example.com"); err != nil {
		t.Fatalf("the domain's one order: %v", err)
	}
	for i := range 10 {
		if err := p.CertificateAllowed(ctx, "b.example.com"); err != errBudget[budget.Domain] {
			t.Fatalf("refusal %d: %v, want the domain budget's refusal", i+1, err)
		}
	}
	// a.example.com's look, then b.example.com's first (the issuers
	// listed once for both).
	if l, e := storage.lists.Load(), storage.exists.Load(); l != 1 || e != 2 {
		t.Errorf("an allowed name and 10 refusals of another made %d List and %d Exists calls, want 1 and 2", l, e)
	}
	if err := p.CertificateAllowed(ctx, "c.example.com"); err != errBudget[budget.Domain] {
		t.Fatalf("another name: %v, want the domain budget's refusal", err)
	}
	if e := storage.exists.Load(); e != 3 {
		t.Errorf("a new name refused made %d Exists calls in all, want 3 (it is looked for)", e)
	}
}

// R7d: an outsider sending handshakes for ever new names under a claimed
// wildcard, the domain's budget spent, costs one Exists per issuer per
// name and no listing of the issuers each time: the issuers are listed
// once a minute at most (issuersMemory), which on a storage whose List
// reads every key under certificates/ (Consul's, some Redis ones) was a
// read of every certificate per handshake.
func TestPermission_R7d_new_refused_names_list_issuers_once(t *testing.T) {
	zero, one := 0, 1
	p := permissionFor(t, hostPermission{Wildcards: "allow", issuanceBudget: issuanceBudget{MaxOrdersPerDomain: &one, MaxOrdersPerInstance: &zero}},
		claimant("w", "*.example.com"))
	dir := t.TempDir()
	for _, issuer := range []string{"acme.example-directory", "zerossl.example-directory"} {
		if err := os.MkdirAll(filepath.Join(dir, certmagic.StorageKeys.CertsPrefix(issuer)), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	storage := &countingStorage{Storage: &certmagic.FileStorage{Path: dir}}
	p.setStorage(storage)
	ctx := context.Background()
	if err := p.CertificateAllowed(ctx, "first.example.com"); err != nil {
		t.Fatalf("the domain's one order: %v", err)
	}
	const names = 100
	for i := range names {
		if err := p.CertificateAllowed(ctx, fmt.Sprintf("n%d.example.com", i)); err != errBudget[budget.Domain] {
			t.Fatalf("new name %d: %v, want the domain budget's refusal", i, err)
		}
	}
	l, e := storage.lists.Load(), storage.exists.Load()
	t.Logf("%d new names refused after one allowed: %d List and %d Exists calls", names, l, e)
	if l != 1 {
		t.Errorf("%d List calls for %d new names, want 1 (the issuers listed once)", l, names+1)
	}
	if want := int32(2 * (names + 1)); e != want {
		t.Errorf("%d Exists calls, want %d (each name under each of 2 issuers)", e, want)
	}
}

// R7d, a hostile tenant: an instance named to sort first ("0") spends its
// max_orders_per_instance on names of its own, then lists another
// tenant's new host too. The victim's host is charged to its own
// instance, which has room: another instance listing a name cannot
// spend the budget it is refused by.
func TestPermission_R7d_shared_name_charged_to_a_claimant_with_room(t *testing.T) {
	zero, two := 0, 2
	p := permissionFor(t, hostPermission{issuanceBudget: issuanceBudget{MaxOrdersPerDomain: &zero, MaxOrdersPerInstance: &two}},
		claimant("web", "www.victim.example"),
		claimant("0", "a1.evil.example,a2.evil.example,www.victim.example"))
	ctx := context.Background()
	for _, name := range []string{"a1.evil.example", "a2.evil.example"} {
		if err := p.CertificateAllowed(ctx, name); err != nil {
			t.Fatalf("%s, within its instance's budget: %v", name, err)
		}
	}
	if err := p.CertificateAllowed(ctx, "www.victim.example"); err != nil {
		t.Fatalf("the victim's name, its own instance's budget unspent: %v", err)
	}
}
