package dicer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// waitTimeout bounds every wait on a condition; nothing here sleeps and
// hopes.
const waitTimeout = 15 * time.Second

// view is the recording sink's state as a condition sees it.
type view = followtest.View

// ---- harness -----------------------------------------------------------------

func newDaemon(t *testing.T) *dicertest.Daemon {
	d := dicertest.New()
	t.Cleanup(d.Close)
	return d
}

// serveUnix serves d on a socket with a short path (sun_path holds 108
// bytes) and returns the gRPC target.
func serveUnix(t *testing.T, d *dicertest.Daemon) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dcr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "d.sock")
	if d != nil {
		if err := d.ServeUnix(path); err != nil {
			t.Fatal(err)
		}
	}
	return "unix://" + path
}

// start runs the adapter until the test ends, and checks that Run returns
// once its context is cancelled.
func start(t *testing.T, cfg Config) (*followtest.Sink, *observer.ObservedLogs) {
	t.Helper()
	if cfg.Pace.Min == 0 {
		cfg.Pace.Min, cfg.Pace.Max = 20*time.Millisecond, 200*time.Millisecond
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return followtest.Start(t, waitTimeout, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		a.Loop().Run(ctx, sink, log)
	})
}

// waitLog waits for a log entry at level whose message or error field
// contains substr.
func waitLog(t *testing.T, logs *observer.ObservedLogs, level zapcore.Level, substr string) observer.LoggedEntry {
	t.Helper()
	return followtest.WaitLog(t, logs, waitTimeout, level, substr)
}

func countLogs(logs *observer.ObservedLogs, level zapcore.Level) int {
	return logs.FilterLevelExact(level).Len()
}

func waitFollowers(t *testing.T, d *dicertest.Daemon, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := d.WaitFollowers(ctx, n); err != nil {
		t.Fatal(err)
	}
}

func running(name, ip string) *dicerpb.Instance {
	return &dicerpb.Instance{
		Name:        name,
		State:       dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		Ip:          ip,
		NetworkName: "default",
		Labels:      map[string]string{catalog.LabelHost: name + ".example.com", "app": "web"},
		Ports:       []*dicerpb.PortMapping{{HostPort: 8080, GuestPort: 80, Protocol: dicerpb.Protocol_PROTOCOL_TCP}},
	}
}

var defaultNet = &dicerpb.Network{Name: "default", Subnet: "172.20.0.0/16", Gateway: "172.20.0.1"}

// ---- tests against the test daemon --------------------------------------------

// The initial listing arrives and every kind of instance event is applied,
// each with exactly one GetInstance (DELETED with none).
func TestFollowAppliesEvents(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	web1 := running("web-1", "172.20.0.5")
	web1.HealthCheck = &dicerpb.HealthCheck{Probe: &dicerpb.HealthCheck_Tcp{Tcp: &dicerpb.HealthCheckTCP{Port: 80}}}
	d.CreateInstance(web1)
	d.CreateInstance(&dicerpb.Instance{Name: "web-2", NetworkName: "default"})
	sink, logs := start(t, Config{Address: serveUnix(t, d)})

	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { return v.Replaces == 1 && len(v.ByID) == 2 })
	sink.Check(func(v view) bool {
		w, _ := v.Named("web-1")
		want := catalog.PublishedPort{HostPort: 8080, GuestPort: 80, Protocol: catalog.TCP}
		if w.State != catalog.StateRunning || w.Health != catalog.HealthStarting || net0(w).Address != "172.20.0.5" ||
			net0(w).Network != "default" || net0(w).Gateway != "172.20.0.1" || w.Labels["app"] != "web" ||
			len(w.Ports) != 1 || w.Ports[0] != want || w.ID == "" {
			t.Errorf("web-1 translated as %+v", w)
		}
		if w2, _ := v.Named("web-2"); w2.State != catalog.StateStopped {
			t.Errorf("web-2 translated as %+v", w2)
		}
		return true
	})
	e := waitLog(t, logs, zapcore.InfoLevel, "connected to the Dicer daemon")
	if e.ContextMap()["instances"] != int64(2) || e.ContextMap()["address"] == "" {
		t.Errorf("connect log fields %v", e.ContextMap())
	}
	if n := d.Calls("GetInstance"); n != 0 {
		t.Fatalf("%d GetInstance calls after the listing, want 0 (the history is not replayed)", n)
	}
	waitFollowers(t, d, 1)

	d.CreateInstance(&dicerpb.Instance{Name: "web-3"}) // CREATED
	sink.WaitFor(t, waitTimeout, "web-3 created", func(v view) bool { _, ok := v.Named("web-3"); return ok })

	d.SetState("web-2", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, map[string]string{"ip": "172.20.0.9"}) // STARTED
	sink.WaitFor(t, waitTimeout, "web-2 running", func(v view) bool {
		w, _ := v.Named("web-2")
		return w.State == catalog.StateRunning && net0(w).Address == "172.20.0.9" && net0(w).Gateway == "172.20.0.1"
	})

	d.SetHealth("web-1", dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY) // HEALTHY
	sink.WaitFor(t, waitTimeout, "web-1 healthy", func(v view) bool { w, _ := v.Named("web-1"); return w.Health == catalog.HealthHealthy })

	d.UpdateInstance("web-1", func(in *dicerpb.Instance) { in.Labels["app"] = "shop" }) // UPDATED
	sink.WaitFor(t, waitTimeout, "web-1 relabelled", func(v view) bool { w, _ := v.Named("web-1"); return w.Labels["app"] == "shop" })

	id3 := d.Instance("web-3").GetId()
	d.RenameInstance("web-3", "web-4") // RENAMED
	sink.WaitFor(t, waitTimeout, "web-3 renamed", func(v view) bool {
		w, ok := v.Named("web-4")
		_, old := v.Named("web-3")
		return ok && !old && w.ID == id3 && len(v.ByID) == 3
	})

	d.DeleteInstance("web-4") // DELETED: no fetch
	sink.WaitFor(t, waitTimeout, "web-4 deleted", func(v view) bool { _, ok := v.ByID[id3]; return !ok && len(v.ByID) == 2 })

	if n := d.Calls("GetInstance"); n != 5 {
		t.Errorf("%d GetInstance calls for 6 events (one of them DELETED), want 5", n)
	}
	if n := d.Calls("ListInstances"); n != 1 {
		t.Errorf("%d ListInstances calls, want 1", n)
	}
	if r := sink.Replaces(); r != 1 {
		t.Errorf("%d Replace calls, want 1", r)
	}
	if n := countLogs(logs, zapcore.ErrorLevel) + countLogs(logs, zapcore.WarnLevel); n != 0 {
		t.Errorf("unexpected warnings or errors:\n%s", followtest.DumpLogs(logs))
	}
}

// Per-event cost does not grow with the number of instances: with 1,000
// instances, one change costs one GetInstance.
func TestOneFetchPerEventWithManyInstances(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	d.EmitQuietly(true)
	for i := range 1000 {
		d.CreateInstance(running(fmt.Sprintf("vm-%04d", i), fmt.Sprintf("172.20.%d.%d", i/250, i%250+2)))
	}
	d.EmitQuietly(false)
	sink, _ := start(t, Config{Address: serveUnix(t, d)})
	sink.WaitFor(t, waitTimeout, "the listing of 1,000 instances", func(v view) bool { return len(v.ByID) == 1000 })
	waitFollowers(t, d, 1)

	d.SetState("vm-0500", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	sink.WaitFor(t, waitTimeout, "vm-0500 stopped", func(v view) bool { w, _ := v.Named("vm-0500"); return w.State == catalog.StateStopped })
	if n := d.Calls("GetInstance"); n != 1 {
		t.Fatalf("%d GetInstance calls for one event among 1,000 instances, want 1", n)
	}
	d.SetState("vm-0999", dicerpb.InstanceState_INSTANCE_STATE_PAUSED, nil)
	sink.WaitFor(t, waitTimeout, "vm-0999 paused", func(v view) bool { w, _ := v.Named("vm-0999"); return w.State == catalog.StatePaused })
	if n := d.Calls("GetInstance"); n != 2 {
		t.Fatalf("%d GetInstance calls for two events, want 2", n)
	}

	// A burst of events for one instance costs at most one fetch each
	// (fewer when they coalesce), and the last state wins.
	const burst = 100
	for i := range burst {
		d.UpdateInstance("vm-0001", func(in *dicerpb.Instance) { in.Labels["n"] = fmt.Sprint(i) })
	}
	sink.WaitFor(t, waitTimeout, "the last of the burst", func(v view) bool {
		w, _ := v.Named("vm-0001")
		return w.Labels["n"] == fmt.Sprint(burst-1)
	})
	if n := d.Calls("GetInstance") - 2; n < 1 || n > burst {
		t.Fatalf("%d GetInstance calls for a burst of %d events", n, burst)
	}
	t.Logf("a burst of %d events on one instance cost %d fetches", burst, d.Calls("GetInstance")-2)
	if n := d.Calls("ListInstances"); n != 1 {
		t.Errorf("%d ListInstances calls, want 1", n)
	}
}

// While the daemon is down, the sink keeps what it last had (R6); after
// the restart, a full re-list adds what was created and removes what was
// deleted during the outage.
func TestDaemonRestartRelists(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	d.CreateInstance(running("keep", "172.20.0.2"))
	old := d.CreateInstance(running("old", "172.20.0.3"))
	sink, logs := start(t, Config{Address: serveUnix(t, d)})
	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { return len(v.ByID) == 2 })
	waitFollowers(t, d, 1)

	d.Stop()
	waitLog(t, logs, zapcore.WarnLevel, "lost the Dicer daemon")
	waitLog(t, logs, zapcore.ErrorLevel, "cannot follow the Dicer daemon") // a reconnect attempt failed
	d.CreateInstance(running("new", "172.20.0.4"))
	d.DeleteInstance("old")
	d.SetState("keep", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	sink.Check(func(v view) bool {
		k, _ := v.Named("keep")
		if _, ok := v.ByID[old.GetId()]; !ok || len(v.ByID) != 2 || k.State != catalog.StateRunning || v.Replaces != 1 {
			t.Errorf("the sink changed while the daemon was down: %v", v)
		}
		return true
	})

	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, waitTimeout, "the re-list after the restart", func(v view) bool {
		k, _ := v.Named("keep")
		_, hasNew := v.Named("new")
		_, hasOld := v.ByID[old.GetId()]
		return v.Replaces == 2 && hasNew && !hasOld && k.State == catalog.StateStopped && len(v.ByID) == 2
	})
	e := waitLog(t, logs, zapcore.InfoLevel, "reconnected to the Dicer daemon")
	if e.ContextMap()["instances"] != int64(2) {
		t.Errorf("reconnect log fields %v", e.ContextMap())
	}
	// Events are followed again after the reconnect.
	waitFollowers(t, d, 1)
	d.SetState("new", dicerpb.InstanceState_INSTANCE_STATE_PAUSED, nil)
	sink.WaitFor(t, waitTimeout, "new paused", func(v view) bool { w, _ := v.Named("new"); return w.State == catalog.StatePaused })
}

// A follower cut off for falling behind (RESOURCE_EXHAUSTED) resubscribes
// and re-lists, so changes it missed are picked up.
func TestCutFollowerRelists(t *testing.T) {
	d := newDaemon(t)
	d.CreateInstance(running("a", "172.20.0.2"))
	sink, logs := start(t, Config{Address: serveUnix(t, d)})
	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { return len(v.ByID) == 1 })
	waitFollowers(t, d, 1)

	d.EmitQuietly(true) // changes the follower never hears of
	d.CreateInstance(running("missed", "172.20.0.3"))
	d.EmitQuietly(false)
	d.CutFollowers()

	sink.WaitFor(t, waitTimeout, "the re-list", func(v view) bool { _, ok := v.Named("missed"); return ok && v.Replaces == 2 })
	e := waitLog(t, logs, zapcore.WarnLevel, "fell behind")
	if !strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "RESOURCE_EXHAUSTED") {
		t.Errorf("fell-behind log fields %v", e.ContextMap())
	}
	if n := d.Calls("ListInstances"); n != 2 {
		t.Errorf("%d ListInstances calls, want 2", n)
	}
	waitFollowers(t, d, 1)
}

// An instance that is gone when its event is fetched (NOT_FOUND) is
// deleted; a failing fetch ends the session and a re-list follows.
func TestFetchErrors(t *testing.T) {
	d := newDaemon(t)
	d.CreateInstance(running("a", "172.20.0.2"))
	d.CreateInstance(running("b", "172.20.0.3"))
	sink, logs := start(t, Config{Address: serveUnix(t, d)})
	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { return len(v.ByID) == 2 })
	waitFollowers(t, d, 1)

	d.SetCallError("GetInstance", status.Error(codes.NotFound, "no instance"))
	d.SetState("a", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	sink.WaitFor(t, waitTimeout, "a deleted after NOT_FOUND", func(v view) bool { _, ok := v.Named("a"); return !ok && len(v.ByID) == 1 })

	d.SetCallError("GetInstance", status.Error(codes.Internal, "boom"))
	d.SetState("b", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	// The re-list brings back a (it still exists) and b's new state.
	sink.WaitFor(t, waitTimeout, "the re-list after a failed fetch", func(v view) bool {
		_, a := v.Named("a")
		b, _ := v.Named("b")
		return v.Replaces >= 2 && a && b.State == catalog.StateStopped
	})
	e := waitLog(t, logs, zapcore.WarnLevel, "lost the Dicer daemon")
	if e.ContextMap()["call"] != "GetInstance" || !strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "boom") {
		t.Errorf("failed fetch log fields %v", e.ContextMap())
	}
	d.SetCallError("GetInstance", nil)
}

// A network event re-lists networks and updates the gateway of the
// instances on that network.
func TestNetworkEventUpdatesGateway(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	blue := running("blue-1", "10.9.0.5")
	blue.NetworkName = "blue"
	d.CreateInstance(blue)
	d.CreateInstance(running("web", "172.20.0.2"))
	sink, _ := start(t, Config{Address: serveUnix(t, d)})
	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { return len(v.ByID) == 2 })
	sink.Check(func(v view) bool {
		if b, _ := v.Named("blue-1"); net0(b).Gateway != "" {
			t.Errorf("blue-1 has gateway %q before its network exists", net0(b).Gateway)
		}
		return true
	})
	waitFollowers(t, d, 1)

	d.AddNetwork(&dicerpb.Network{Name: "blue", Subnet: "10.9.0.0/24", Gateway: "10.9.0.1"})
	sink.WaitFor(t, waitTimeout, "blue-1's gateway", func(v view) bool { b, _ := v.Named("blue-1"); return net0(b).Gateway == "10.9.0.1" })
	if n := d.Calls("ListNetworks"); n != 2 {
		t.Errorf("%d ListNetworks calls, want 2", n)
	}
	if n := d.Calls("GetInstance"); n != 0 {
		t.Errorf("%d GetInstance calls for a network event, want 0", n)
	}
}

// A daemon that is down at start: the failure is logged once at error
// level (then debug), and the adapter connects when the daemon appears.
func TestDaemonDownAtStart(t *testing.T) {
	addr := serveUnix(t, nil)
	sink, logs := start(t, Config{Address: addr})
	deadline := time.Now().Add(waitTimeout)
	for countLogs(logs, zapcore.DebugLevel) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no repeated attempts:\n%s", followtest.DumpLogs(logs))
		}
		time.Sleep(5 * time.Millisecond) // poll the condition
	}
	errs := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	if len(errs) != 1 {
		t.Fatalf("%d error logs for one repeated failure, want 1:\n%s", len(errs), followtest.DumpLogs(logs))
	}
	if errs[0].ContextMap()["address"] != addr || errs[0].ContextMap()["retry_in"] == nil {
		t.Errorf("error log fields %v", errs[0].ContextMap())
	}
	if sink.Replaces() != 0 {
		t.Fatal("a listing without a daemon")
	}

	d := newDaemon(t)
	d.CreateInstance(running("late", "172.20.0.2"))
	if err := d.ServeUnix(strings.TrimPrefix(addr, "unix://")); err != nil {
		t.Fatal(err)
	}
	sink.WaitFor(t, waitTimeout, "the listing once the daemon is up", func(v view) bool { _, ok := v.Named("late"); return ok })
	waitLog(t, logs, zapcore.InfoLevel, "connected to the Dicer daemon")
}

// An invalid configuration is refused by New, naming the setting at
// fault, before anything connects.
func TestNewRefusesInvalidConfig(t *testing.T) {
	_, err := New(Config{Address: "10.0.0.1:7443"})
	if got := fmt.Sprint(err); got != `token: required for the TCP address "10.0.0.1:7443"` {
		t.Errorf("error %q", got)
	}
}

// ---- TCP --------------------------------------------------------------------

func serveTCP(t *testing.T, d *dicertest.Daemon, addr string) string {
	t.Helper()
	got, err := d.ServeTCP(addr)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The TCP listener with a fingerprinted read-only token: pinned TLS,
// bearer token, networks listed on a loopback address.
func TestTCPWithToken(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	d.CreateInstance(running("a", "172.20.0.2"))
	addr := serveTCP(t, d, "127.0.0.1:0")
	tok := d.AddToken("caddy", "instances:read", "events:read", "networks:read")
	if p, err := ParseToken(tok); err != nil || p.Fingerprint != d.Fingerprint() {
		t.Fatalf("test daemon token %+v, %v", p, err)
	}
	sink, logs := start(t, Config{Address: addr, Token: tok})
	sink.WaitFor(t, waitTimeout, "the listing over TCP", func(v view) bool { a, ok := v.Named("a"); return ok && net0(a).Gateway == "172.20.0.1" })
	waitFollowers(t, d, 1)
	d.SetState("a", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	sink.WaitFor(t, waitTimeout, "a stopped", func(v view) bool { a, _ := v.Named("a"); return a.State == catalog.StateStopped })
	if n := countLogs(logs, zapcore.ErrorLevel) + countLogs(logs, zapcore.WarnLevel); n != 0 {
		t.Errorf("unexpected warnings or errors:\n%s", followtest.DumpLogs(logs))
	}
}

// A token whose fingerprint is another daemon's: no listing, and the log
// names the mismatch.
func TestTCPWrongFingerprint(t *testing.T) {
	d := newDaemon(t)
	d.CreateInstance(running("a", "172.20.0.2"))
	addr := serveTCP(t, d, "127.0.0.1:0")
	tok := d.AddToken("caddy")
	wrong := strings.Repeat("ab", 32)
	if wrong == d.Fingerprint() {
		wrong = strings.Repeat("cd", 32)
	}
	tok = tok[:len(tok)-64] + wrong
	sink, logs := start(t, Config{Address: addr, Token: tok})
	e := waitLog(t, logs, zapcore.ErrorLevel, "does not match the token's")
	want := "TLS handshake failed: daemon certificate fingerprint " + d.Fingerprint() + " does not match the token's " + wrong
	if got := e.ContextMap()["error"]; got != want {
		t.Errorf("error field\n got %q\nwant %q", got, want)
	}
	if sink.Replaces() != 0 || d.Calls("GetEvents") != 0 || d.Calls("ListInstances") != 0 {
		t.Errorf("calls reached a daemon whose certificate does not match: replaces %d, GetEvents %d, ListInstances %d",
			sink.Replaces(), d.Calls("GetEvents"), d.Calls("ListInstances"))
	}
}

// An unknown token: UNAUTHENTICATED is logged with what to check.
func TestTCPUnknownToken(t *testing.T) {
	d := newDaemon(t)
	addr := serveTCP(t, d, "127.0.0.1:0")
	tok := "dicer_" + secret52 + "_" + d.Fingerprint() // well formed, never issued
	sink, logs := start(t, Config{Address: addr, Token: tok})
	e := waitLog(t, logs, zapcore.ErrorLevel, "UNAUTHENTICATED")
	if got := e.ContextMap()["error"]; got != "daemon refused the token (UNAUTHENTICATED): check the token's secret" {
		t.Errorf("error field %q", got)
	}
	if strings.Contains(followtest.DumpLogs(logs), secret52) {
		t.Error("the log reveals the token's secret")
	}
	if sink.Replaces() != 0 {
		t.Error("a listing with an unknown token")
	}
}

// A token lacking a scope the adapter needs: the log names the scope.
func TestTCPMissingScope(t *testing.T) {
	for _, tt := range []struct {
		scopes  []string
		missing string
	}{
		{[]string{"events:read", "networks:read"}, "instances:read"},
		{[]string{"instances:read", "networks:read"}, "events:read"},
	} {
		t.Run(tt.missing, func(t *testing.T) {
			d := newDaemon(t)
			d.CreateInstance(running("a", "172.20.0.2"))
			addr := serveTCP(t, d, "127.0.0.1:0")
			sink, logs := start(t, Config{Address: addr, Token: d.AddToken("caddy", tt.scopes...)})
			e := waitLog(t, logs, zapcore.ErrorLevel, "lacks scope "+tt.missing)
			want := `daemon refused the token (PERMISSION_DENIED): token "caddy" lacks scope ` + tt.missing
			if got := e.ContextMap()["error"]; got != want {
				t.Errorf("error field %q, want %q", got, want)
			}
			if sink.Replaces() != 0 {
				t.Error("a listing without the scope")
			}
		})
	}
}

// On a loopback address networks are listed; a token without
// networks:read still works, with a warning and no gateways.
func TestTCPLoopbackWithoutNetworksScope(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	d.CreateInstance(running("a", "172.20.0.2"))
	addr := serveTCP(t, d, "127.0.0.1:0")
	sink, logs := start(t, Config{Address: addr, Token: d.AddToken("caddy", "instances:read", "events:read")})
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.Named("a"); return ok })
	sink.Check(func(v view) bool {
		if a, _ := v.Named("a"); net0(a).Gateway != "" {
			t.Errorf("gateway %q without networks:read", net0(a).Gateway)
		}
		return true
	})
	e := waitLog(t, logs, zapcore.WarnLevel, "cannot list the Dicer daemon's networks")
	if !strings.Contains(fmt.Sprint(e.ContextMap()["error"]), "lacks scope networks:read") {
		t.Errorf("warning fields %v", e.ContextMap())
	}
	// A network event in this session does not retry (and re-warn).
	waitFollowers(t, d, 1)
	d.AddNetwork(&dicerpb.Network{Name: "blue", Gateway: "10.9.0.1"})
	d.SetState("a", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil) // a later event, to know the first was handled
	sink.WaitFor(t, waitTimeout, "a stopped", func(v view) bool { a, _ := v.Named("a"); return a.State == catalog.StateStopped })
	if n := d.Calls("ListNetworks"); n != 1 {
		t.Errorf("%d ListNetworks calls, want 1", n)
	}
	if n := countLogs(logs, zapcore.WarnLevel); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, followtest.DumpLogs(logs))
	}
}

// With a TCP address that is not loopback, networks are not listed at all
// (the daemon's host is used instead), so a token without networks:read
// works without a warning. Needs a non-loopback address on this host.
func TestTCPNonLoopbackSkipsNetworks(t *testing.T) {
	ip := nonLoopbackIPv4(t)
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	d.CreateInstance(running("a", "172.20.0.2"))
	addr := serveTCP(t, d, net.JoinHostPort(ip, "0"))
	if DaemonHost(addr) != ip {
		t.Fatalf("DaemonHost(%q) = %q", addr, DaemonHost(addr))
	}
	sink, logs := start(t, Config{Address: addr, Token: d.AddToken("caddy", "instances:read", "events:read")})
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.Named("a"); return ok })
	if n := d.Calls("ListNetworks"); n != 0 {
		t.Errorf("%d ListNetworks calls with a non-loopback address, want 0", n)
	}
	if n := countLogs(logs, zapcore.ErrorLevel) + countLogs(logs, zapcore.WarnLevel); n != 0 {
		t.Errorf("unexpected warnings or errors:\n%s", followtest.DumpLogs(logs))
	}
}

func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
				if ln, err := net.Listen("tcp", net.JoinHostPort(n.IP.String(), "0")); err == nil {
					ln.Close()
					return n.IP.String()
				}
			}
		}
	}
	t.Skip("no non-loopback IPv4 address to listen on; listsNetworks is covered by TestDaemonHostAndListsNetworks")
	return ""
}

// ---- a daemon whose certificate a CA signed ----------------------------------

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// file is the CA certificate as a PEM file.
	file string
}

func newCA(t *testing.T) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert, key, writePEM(t, der)}
}

// writePEM writes a DER certificate to a PEM file of the test's.
func writePEM(t *testing.T, der []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (ca testCA) issue(t *testing.T, dnsNames []string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "dicerd"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     dnsNames,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tls{ca, server_name}: a token without a fingerprint, and the daemon's
// certificate verified against the given roots and name.
func TestTCPCASignedDaemon(t *testing.T) {
	ca := newCA(t)
	d, err := dicertest.NewWithCertificate(ca.issue(t, []string{"dicerd.test"}, []net.IP{net.IPv4(127, 0, 0, 1)}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	d.CreateInstance(running("a", "172.20.0.2"))
	addr := serveTCP(t, d, "127.0.0.1:0")
	tok := d.AddToken("caddy")
	if p, err := ParseToken(tok); err != nil || p.Fingerprint != "" {
		t.Fatalf("token of a CA-signed daemon: %+v, %v", p, err)
	}

	t.Run("roots and server name", func(t *testing.T) {
		sink, _ := start(t, Config{Address: addr, Token: tok, CAFile: ca.file, ServerName: "dicerd.test"})
		sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.Named("a"); return ok })
	})
	t.Run("roots, name from the address's IP", func(t *testing.T) {
		sink, _ := start(t, Config{Address: addr, Token: tok, CAFile: ca.file})
		sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.Named("a"); return ok })
	})
	t.Run("unknown CA is refused", func(t *testing.T) {
		sink, logs := start(t, Config{Address: addr, Token: tok, CAFile: newCA(t).file, ServerName: "dicerd.test"})
		waitLog(t, logs, zapcore.ErrorLevel, "certificate signed by unknown authority")
		if sink.Replaces() != 0 {
			t.Error("a listing from a daemon signed by an untrusted CA")
		}
	})
	t.Run("wrong server name is refused", func(t *testing.T) {
		sink, logs := start(t, Config{Address: addr, Token: tok, CAFile: ca.file, ServerName: "other.test"})
		waitLog(t, logs, zapcore.ErrorLevel, "not other.test")
		if sink.Replaces() != 0 {
			t.Error("a listing from a daemon with another name")
		}
	})
}

// The daemon's generated certificate has no SANs, so it cannot be verified
// by name even when it is trusted as a root: Go's verifier ignores the
// Common Name. Such a daemon must be reached with a fingerprinted token.
func TestTCPSelfSignedWithoutSANsCannotBeVerifiedByName(t *testing.T) {
	d := newDaemon(t)
	d.CreateInstance(running("a", "172.20.0.2"))
	addr := serveTCP(t, d, "127.0.0.1:0")
	tok := d.AddToken("caddy")
	tok = tok[:len(tok)-65] // drop "_" + fingerprint
	ca := filepath.Join(t.TempDir(), "daemon.pem")
	if err := os.WriteFile(ca, d.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	sink, logs := start(t, Config{Address: addr, Token: tok, CAFile: ca, ServerName: "dicerd"})
	e := waitLog(t, logs, zapcore.ErrorLevel, "x509:")
	t.Logf("refused as expected: %v", e.ContextMap()["error"])
	if sink.Replaces() != 0 {
		t.Error("a listing from a daemon whose certificate names no host")
	}
}

// The other socket target forms: "unix:/path" and "unix-abstract:NAME".
func TestUnixTargetForms(t *testing.T) {
	t.Run("unix:/path", func(t *testing.T) {
		d := newDaemon(t)
		d.CreateInstance(running("a", "172.20.0.2"))
		addr := "unix:" + strings.TrimPrefix(serveUnix(t, d), "unix://")
		sink, _ := start(t, Config{Address: addr})
		sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.Named("a"); return ok })
	})
	t.Run("unix-abstract:NAME", func(t *testing.T) {
		d := newDaemon(t)
		d.CreateInstance(running("a", "172.20.0.2"))
		name := fmt.Sprintf("dcr-test-%d-%d", os.Getpid(), time.Now().UnixNano())
		if err := d.ServeUnix("@" + name); err != nil {
			t.Skipf("no abstract unix sockets here: %v", err)
		}
		sink, _ := start(t, Config{Address: "unix-abstract:" + name})
		sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { _, ok := v.Named("a"); return ok })
	})
}

// net0 is the instance's one network attachment (Dicer instances have one).
func net0(i catalog.Instance) catalog.Attachment {
	if len(i.Networks) == 0 {
		return catalog.Attachment{}
	}
	return i.Networks[0]
}

// ---- pace ---------------------------------------------------------------------

// outage is how long the daemon is away in the tests of its return.
const outage = 30 * time.Second

// R6: after a long outage, an instance created meanwhile is in the sink
// within a second of the daemon's return: an absent unix socket is retried
// at the connect pace (follow.LocalConnectMax), whatever the outage's
// length, with the default pace otherwise.
func TestReturnAfterLongOutageWithinASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s outage: not under -short")
	}
	d := newDaemon(t)
	d.CreateInstance(running("before", "172.20.0.2"))
	sink, logs := start(t, Config{Address: serveUnix(t, d), Pace: follow.Pace{Min: follow.DefaultMinBackoff}})
	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { _, ok := v.Named("before"); return ok })
	waitFollowers(t, d, 1)

	d.Stop()
	over := time.NewTimer(outage)
	defer over.Stop()
	waitLog(t, logs, zapcore.WarnLevel, "lost the Dicer daemon")
	d.CreateInstance(running("meanwhile", "172.20.0.3"))
	<-over.C // the outage's length is the scenario, not a wait for the adapter
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	sink.WaitFor(t, waitTimeout, "the instance created during the outage", func(v view) bool { _, ok := v.Named("meanwhile"); return ok })
	took := time.Since(back)
	t.Logf("after a %v outage, the instance created meanwhile was in the sink %v after the daemon's return",
		outage, took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("routes current %v after the daemon's return, want within 1s", took)
	}
}

// A daemon that cuts the session off right after each listing is
// re-listed ever less often (to the cap), not at the minimum delay, and
// one warning says so.
func TestRepeatedCutsSpaceRelists(t *testing.T) {
	d := newDaemon(t)
	d.CreateInstance(running("a", "172.20.0.2"))
	pace := follow.Pace{Min: 20 * time.Millisecond, Max: 320 * time.Millisecond}
	sink, logs := start(t, Config{Address: serveUnix(t, d), Pace: pace})
	sink.WaitFor(t, waitTimeout, "the initial listing", func(v view) bool { return v.Replaces == 1 })

	const window = 4 * time.Second
	end := time.Now().Add(window)
	replaces, cuts := 0, 0
	for time.Now().Before(end) {
		if sink.Replaces() > replaces && d.Followers() > 0 {
			replaces = sink.Replaces()
			d.CutFollowers() // right after the listing
			cuts++
		}
		time.Sleep(2 * time.Millisecond) // poll the condition
	}
	lists := int(d.Calls("ListInstances") - 1)
	// At the minimum delay (10-20ms) that would be well over 100 listings;
	// spaced out, 20, 40, 80, 160, then 320ms (jittered down to half) at
	// the most, it is at most 4 + (4s - 150ms) / 160ms.
	t.Logf("%d re-listings and %d cuts in %v", lists, cuts, window)
	if lists > 4+int((window-150*time.Millisecond)/(160*time.Millisecond))+1 || lists < 5 {
		t.Errorf("%d re-listings in %v with cuts right after each; want them spaced out to the %v cap", lists, window, pace.Max)
	}
	if n := logs.FilterMessageSnippet("keeps ending the session soon after each listing").Len(); n != 1 {
		t.Errorf("%d warnings that the daemon keeps cutting the session off, want 1:\n%s", n, followtest.DumpLogs(logs))
	}
	if n := logs.FilterMessageSnippet("fell behind").Len(); n != 1 {
		t.Errorf("%d fell-behind warnings, want 1 (the first cut)", n)
	}
}
