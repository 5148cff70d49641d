package dicer

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

// startWith is start with the caught_up bound set.
func startWith(t *testing.T, cfg Config, caughtUp time.Duration) (*followtest.Sink, *observer.ObservedLogs) {
	t.Helper()
	cfg.Pace.Min, cfg.Pace.Max = 20*time.Millisecond, 200*time.Millisecond
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.caughtUp = caughtUp
	return followtest.Start(t, waitTimeout, func(ctx context.Context, log *zap.Logger, sink catalog.Sink) {
		a.Loop().Run(ctx, sink, log)
	})
}

// TestSubscribeCaughtUpDeadline: a daemon that never says caught_up ends
// each session after the bound, with a reason that says so, and the loop
// reconnects; once it says it again, the daemon is followed. On e790bcf
// the first session waited forever, logging nothing.
func TestSubscribeCaughtUpDeadline(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	d.CreateInstance(running("web-1", "172.20.0.5"))
	d.WithholdCaughtUp(true)
	sink, logs := startWith(t, Config{Address: serveUnix(t, d)}, 200*time.Millisecond)

	e := waitLog(t, logs, zapcore.ErrorLevel, "caught_up")
	if e.ContextMap()["call"] != "GetEvents" {
		t.Errorf("the error names the call %v, want GetEvents", e.ContextMap()["call"])
	}
	deadline := time.Now().Add(waitTimeout)
	for d.Calls("GetEvents") < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d GetEvents calls: the loop does not reconnect", d.Calls("GetEvents"))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sink.Replaces() != 0 {
		t.Error("a listing was fed although the history never ended")
	}
	d.WithholdCaughtUp(false)
	sink.WaitFor(t, waitTimeout, "the listing once caught_up comes", func(v view) bool { return v.Replaces == 1 && len(v.ByID) == 1 })
}

// TestFetchOfAnotherInstanceIgnored: a GetInstance answer for another
// instance than the one asked for is ignored with an error logged; the
// sink keeps what it had and the session goes on. On e790bcf the answer
// was put in the sink under its own ID, as if the event had been about it.
func TestFetchOfAnotherInstanceIgnored(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	web1 := d.CreateInstance(running("web-1", "172.20.0.5"))
	victim := d.CreateInstance(running("victim", "172.20.0.6"))
	sink, logs := start(t, Config{Address: serveUnix(t, d)})
	sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return len(v.ByID) == 2 })
	waitFollowers(t, d, 1)

	// Asked for web-1, the daemon answers with a forged copy of victim,
	// stopped. (The hook runs under the daemon's lock.)
	forged := proto.Clone(d.Instance("victim")).(*dicerpb.Instance)
	forged.State = dicerpb.InstanceState_INSTANCE_STATE_STOPPED
	d.AnswerGetInstance(func(asked *dicerpb.Instance) *dicerpb.Instance {
		if asked.GetName() != "web-1" {
			return asked
		}
		return proto.Clone(forged).(*dicerpb.Instance)
	})
	d.UpdateInstance("web-1", func(in *dicerpb.Instance) { in.Labels["v"] = "2" })
	e := waitLog(t, logs, zapcore.ErrorLevel, "answered GetInstance with another instance")
	if e.ContextMap()["asked"] != web1.GetId() || e.ContextMap()["answered"] != victim.GetId() {
		t.Errorf("log fields %v", e.ContextMap())
	}
	v := sink.Snapshot()
	if v.ByID[victim.GetId()].State != catalog.StateRunning {
		t.Errorf("the forged answer changed victim: %+v", v.ByID[victim.GetId()])
	}
	if v.ByID[web1.GetId()].Labels["v"] != "" {
		t.Errorf("web-1 changed from an answer about another instance: %+v", v.ByID[web1.GetId()])
	}

	// The session goes on: the next honest answer is applied.
	d.AnswerGetInstance(nil)
	d.UpdateInstance("web-1", func(in *dicerpb.Instance) { in.Labels["v"] = "3" })
	sink.WaitFor(t, waitTimeout, "the next update", func(v view) bool { return v.ByID[web1.GetId()].Labels["v"] == "3" })
	if n := logs.FilterMessageSnippet("lost the Dicer daemon").Len(); n != 0 {
		t.Errorf("the session ended over the forged answer (%d)", n)
	}
}

// TestLinkLocalHostIPNeverDialled (R4b): a port published on a link-local
// host address (169.254.169.254, the cloud metadata service's; fe80::1),
// a multicast one or a name is not used: requests go to the instance's own
// address, and one warning names the instance. On e790bcf the mapping was
// kept and Caddy dialled 169.254.169.254:80.
func TestLinkLocalHostIPNeverDialled(t *testing.T) {
	d := newDaemon(t)
	d.AddNetwork(defaultNet)
	in := running("meta", "172.20.0.7")
	in.Ports = []*dicerpb.PortMapping{
		{HostIp: "169.254.169.254", HostPort: 80, GuestPort: 80, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
		{HostIp: "fe80::1", HostPort: 81, GuestPort: 81, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
		{HostIp: "224.0.0.1", HostPort: 82, GuestPort: 82, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
		{HostIp: "metadata.google.internal", HostPort: 83, GuestPort: 83, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
		{HostIp: "10.1.2.3", HostPort: 8443, GuestPort: 443, Protocol: dicerpb.Protocol_PROTOCOL_TCP},
	}
	d.CreateInstance(in)
	sink, logs := start(t, Config{Address: serveUnix(t, d)})
	v := sink.WaitFor(t, waitTimeout, "the listing", func(v view) bool { return len(v.ByID) == 1 })
	got, _ := v.Named("meta")
	want := []catalog.PublishedPort{{HostIP: "10.1.2.3", HostPort: 8443, GuestPort: 443, Protocol: catalog.TCP}}
	if len(got.Ports) != 1 || got.Ports[0] != want[0] {
		t.Errorf("ports %+v, want only %+v", got.Ports, want)
	}
	e := waitLog(t, logs, zapcore.WarnLevel, "published port not used")
	if e.ContextMap()["instance"] != "meta" {
		t.Errorf("log fields %v", e.ContextMap())
	}
	// Once per instance: an update does not warn again.
	d.UpdateInstance("meta", func(in *dicerpb.Instance) { in.Labels["v"] = "2" })
	sink.WaitFor(t, waitTimeout, "the update", func(v view) bool { m, _ := v.Named("meta"); return m.Labels["v"] == "2" })
	if n := logs.FilterMessageSnippet("published port not used").Len(); n != 1 {
		t.Errorf("%d warnings, want 1", n)
	}
}
