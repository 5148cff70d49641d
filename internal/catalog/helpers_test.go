package catalog_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// opt changes one thing of an instance built by inst.
type opt func(*catalog.Instance)

// inst builds an instance that is routable by R1 unless opts say otherwise:
// running, no health check, address 10.0.0.2 on network net0, ID "id-"+name,
// no labels, nothing published.
func inst(name string, opts ...opt) catalog.Instance {
	i := catalog.Instance{
		ID:       "id-" + name,
		Name:     name,
		Labels:   map[string]string{},
		State:    catalog.StateRunning,
		Networks: []catalog.Attachment{{Network: "net0", Address: "10.0.0.2"}},
	}
	for _, o := range opts {
		o(&i)
	}
	return i
}

// id sets the instance's ID (e.g. to rename an instance: same ID, new name).
func id(s string) opt { return func(i *catalog.Instance) { i.ID = s } }

// label sets labels from key, value pairs.
func label(kv ...string) opt {
	return func(i *catalog.Instance) {
		for j := 0; j+1 < len(kv); j += 2 {
			i.Labels[kv[j]] = kv[j+1]
		}
	}
}

// host sets the caddy.host label.
func host(h string) opt { return label(catalog.LabelHost, h) }

// port sets the caddy.port label.
func port(p string) opt { return label(catalog.LabelPort, p) }

func state(s catalog.State) opt   { return func(i *catalog.Instance) { i.State = s } }
func health(h catalog.Health) opt { return func(i *catalog.Instance) { i.Health = h } }
func addr(a string) opt           { return func(i *catalog.Instance) { i.Networks[0].Address = a } }
func gateway(g string) opt        { return func(i *catalog.Instance) { i.Networks[0].Gateway = g } }

// wake marks the instance as woken by a connection to a published port.
func wake() opt { return func(i *catalog.Instance) { i.WakeOnConnect = true } }

// standby puts the instance on standby, wakeable by a connection (R5).
func standby() opt {
	return func(i *catalog.Instance) { i.State = catalog.StateStandby; i.WakeOnConnect = true }
}

// publish publishes guest port on hostIP:hostPort over TCP ("" = every host
// address).
func publish(hostIP string, hostPort, guestPort uint16) opt {
	return publishProto(hostIP, hostPort, guestPort, catalog.TCP)
}

func publishProto(hostIP string, hostPort, guestPort uint16, p catalog.Protocol) opt {
	return func(i *catalog.Instance) {
		i.Ports = append(i.Ports, catalog.PublishedPort{HostIP: hostIP, HostPort: hostPort, GuestPort: guestPort, Protocol: p})
	}
}

// targets renders targets as "name dial" strings, nil for none.
func targets(ts []catalog.Target) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Instance+" "+t.Dial)
	}
	return out
}

// unspelt rewrites the dial addresses of "name dial" strings in their
// plain spelling (10.0.0.1:80 for [0:00:0:0:0:FFFF:10.0.0.1]:80).
func unspelt(list []string) []string {
	var out []string
	for _, s := range list {
		name, dial, _ := strings.Cut(s, " ")
		if ap, err := netip.ParseAddrPort(dial); err == nil {
			dial = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
		}
		out = append(out, name+" "+dial)
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// request is Targets as a Caddy module calls it for a raw Host header.
func request(c *catalog.Catalog, v *catalog.View, routePort int, rawHost string) []string {
	return targets(c.Snapshot().Targets(nil, catalog.Route{View: v, Port: routePort}, catalog.NormalizeHost(rawHost)))
}

func watch(c *catalog.Catalog, sel string) *catalog.View {
	return c.Watch(selector.MustParse(sel))
}

// observed returns a logger recording every entry at debug level and above.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return zap.New(core), logs
}

// describe renders log entries as "level message key=value ..." lines with
// fields in the order logged, for readable test failures and comparisons.
func describe(entries []observer.LoggedEntry) []string {
	var out []string
	for _, e := range entries {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s", e.Level, e.Message)
		for _, f := range e.Context {
			fmt.Fprintf(&b, " %s=%v", f.Key, fieldValue(f))
		}
		out = append(out, b.String())
	}
	return out
}

func fieldValue(f zapcore.Field) any {
	if f.Type == zapcore.StringType {
		return f.String
	}
	enc := zapcore.NewMapObjectEncoder()
	f.AddTo(enc)
	return enc.Fields[f.Key]
}

func mustEqual(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !equal(got, want) {
		t.Errorf("%s:\n got  %q\n want %q", what, got, want)
	}
}
