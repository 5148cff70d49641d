package dicertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// ---- helpers ---------------------------------------------------------------

func newTestDaemon(t *testing.T) *Daemon {
	t.Helper()
	d := New()
	t.Cleanup(d.Close)
	return d
}

func socketPath(t *testing.T) string {
	t.Helper()
	// t.TempDir can exceed the 108-byte limit of unix socket paths.
	dir, err := os.MkdirTemp("", "dt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "d.sock")
}

func serveUnix(t *testing.T, d *Daemon) string {
	t.Helper()
	path := socketPath(t)
	if err := d.ServeUnix(path); err != nil {
		t.Fatal(err)
	}
	return path
}

func dial(t *testing.T, target string, opts ...grpc.DialOption) dicerpb.DaemonServiceClient {
	t.Helper()
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return dicerpb.NewDaemonServiceClient(cc)
}

func unixClient(t *testing.T, path string, opts ...grpc.DialOption) dicerpb.DaemonServiceClient {
	t.Helper()
	return dial(t, "unix://"+path, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
}

// bearer sends "Bearer <token>"; rawAuth sends its value as it is.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

type rawAuth string

func (r rawAuth) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": string(r)}, nil
}
func (rawAuth) RequireTransportSecurity() bool { return true }

// pinnedTLS trusts exactly the certificate whose SubjectPublicKeyInfo hashes
// to fingerprint, as the real client does with a token's fingerprint.
func pinnedTLS(fingerprint string) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("daemon sent no certificate")
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].RawSubjectPublicKeyInfo)
			if got := hex.EncodeToString(sum[:]); got != fingerprint {
				return fmt.Errorf("daemon fingerprint %s, want %s", got, fingerprint)
			}
			return nil
		},
	}
}

func tcpClient(t *testing.T, addr, fingerprint string, auth credentials.PerRPCCredentials) dicerpb.DaemonServiceClient {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(pinnedTLS(fingerprint)))}
	if auth != nil {
		opts = append(opts, grpc.WithPerRPCCredentials(auth))
	}
	return dial(t, "passthrough:///"+addr, opts...)
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, err error, code codes.Code, msg string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || (msg != "" && st.Message() != msg) {
		t.Fatalf("error %v, want %s %q", err, code, msg)
	}
}

// readAll reads a stream until it ends; err is nil on a clean end.
func readAll(s grpc.ServerStreamingClient[dicerpb.GetEventsResponse]) ([]*dicerpb.GetEventsResponse, error) {
	var out []*dicerpb.GetEventsResponse
	for {
		r, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}

// readHistory reads responses up to and including the caught_up one.
func readHistory(t *testing.T, s grpc.ServerStreamingClient[dicerpb.GetEventsResponse]) []*dicerpb.Event {
	t.Helper()
	var evs []*dicerpb.Event
	for {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("reading history: %v", err)
		}
		evs = append(evs, r.Events...)
		if r.CaughtUp {
			return evs
		}
	}
}

func actions(evs []*dicerpb.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, strings.TrimPrefix(ev.Action.String(), "EVENT_ACTION_"))
	}
	return out
}

func running(name, ip string) *dicerpb.Instance {
	return &dicerpb.Instance{
		Name: name, Ip: ip, State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		Labels: map[string]string{"app": "web"},
	}
}

// ---- instances ---------------------------------------------------------------

func TestListGetNotFound(t *testing.T) {
	d := newTestDaemon(t)
	c := unixClient(t, serveUnix(t, d))
	ctx := testCtx(t)

	a := d.CreateInstance(running("web-1", "10.0.0.1"))
	d.CreateInstance(&dicerpb.Instance{Name: "web-2", Id: "fixedid"})
	if len(a.Id) != 32 || a.CreateTime == nil || a.UpdateTime == nil {
		t.Fatalf("created %v", a)
	}

	list, err := c.ListInstances(ctx, &dicerpb.ListInstancesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Instances) != 2 || list.Instances[0].Name != "web-1" || list.Instances[1].Name != "web-2" {
		t.Fatalf("list %v", list.Instances)
	}
	if got := list.Instances[1].State; got != dicerpb.InstanceState_INSTANCE_STATE_STOPPED {
		t.Fatalf("web-2 state %v, want STOPPED", got)
	}
	for _, key := range []string{"web-1", a.Id} {
		got, err := c.GetInstance(ctx, &dicerpb.GetInstanceRequest{Name: key})
		if err != nil {
			t.Fatal(err)
		}
		if got.Name != "web-1" || got.Ip != "10.0.0.1" || got.Labels["app"] != "web" {
			t.Fatalf("GetInstance(%s) = %v", key, got)
		}
	}
	_, err = c.GetInstance(ctx, &dicerpb.GetInstanceRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound, `instance "nope" not found`)
	_, err = c.GetInstance(ctx, &dicerpb.GetInstanceRequest{})
	wantCode(t, err, codes.InvalidArgument, "")

	if n := d.Calls("GetInstance"); n != 4 {
		t.Fatalf("Calls(GetInstance) = %d, want 4", n)
	}
	if n := d.Calls("ListInstances"); n != 1 {
		t.Fatalf("Calls(ListInstances) = %d, want 1", n)
	}

	// The returned instances are clones.
	list.Instances[0].Name = "changed"
	if d.Instance("web-1") == nil || d.Instance("changed") != nil {
		t.Fatal("a client's copy aliases the daemon's state")
	}

	d.AddNetwork(&dicerpb.Network{Name: "default", Subnet: "172.20.0.0/16"})
	nets, err := c.ListNetworks(ctx, &dicerpb.ListNetworksRequest{})
	if err != nil || len(nets.Networks) != 1 {
		t.Fatalf("ListNetworks = %v, %v", nets, err)
	}
	n, err := c.GetNetwork(ctx, &dicerpb.GetNetworkRequest{Name: "default"})
	if err != nil || n.Subnet != "172.20.0.0/16" || n.Id == "" {
		t.Fatalf("GetNetwork = %v, %v", n, err)
	}
	_, err = c.GetNetwork(ctx, &dicerpb.GetNetworkRequest{Name: "other"})
	wantCode(t, err, codes.NotFound, "")

	hi, err := c.GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
	if err != nil || hi.Version != Version || hi.Token != "" || hi.Fingerprint != "" || len(hi.ListenerAddresses) != 0 {
		t.Fatalf("GetHostInfo over the socket without TCP = %v, %v", hi, err)
	}
}

func TestMutationEvents(t *testing.T) {
	d := newTestDaemon(t)
	hc := &dicerpb.HealthCheck{Probe: &dicerpb.HealthCheck_Tcp{Tcp: &dicerpb.HealthCheckTCP{Port: 80}}, Retries: 3}
	in := running("web", "10.0.0.5")
	in.HealthCheck = hc
	d.CreateInstance(in)
	if h := d.Instance("web").Health; h.GetStatus() != dicerpb.HealthStatus_HEALTH_STATUS_STARTING {
		t.Fatalf("health after create %v", h)
	}
	d.SetHealth("web", dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY)
	d.SetHealth("web", dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY)
	d.SetState("web", dicerpb.InstanceState_INSTANCE_STATE_PAUSED, nil)
	d.SetState("web", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
	if h := d.Instance("web").Health; h.GetStatus() != dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY {
		t.Fatalf("health after un-pause %v, want it kept", h)
	}
	d.SetState("web", dicerpb.InstanceState_INSTANCE_STATE_STANDBY, map[string]string{"idle_seconds": "600"})
	if d.Instance("web").Health != nil {
		t.Fatal("health kept on standby")
	}
	d.SetState("web", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, map[string]string{"woken_by_port": "8080"})
	if h := d.Instance("web").Health; h.GetStatus() != dicerpb.HealthStatus_HEALTH_STATUS_STARTING {
		t.Fatalf("health after wake %v, want STARTING", h)
	}
	d.UpdateInstance("web", func(i *dicerpb.Instance) { i.Labels["tier"] = "a" })
	d.RenameInstance("web", "www")
	d.SetState("www", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, map[string]string{"exit_code": "3"})
	if i := d.Instance("www"); i.GetExitCode() != 3 || i.Health != nil || i.FinishTime == nil {
		t.Fatalf("after exit %v", i)
	}
	d.SetState("www", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
	d.SetState("www", dicerpb.InstanceState_INSTANCE_STATE_FAILED, nil)
	d.DeleteInstance("www")
	if d.Instance("www") != nil {
		t.Fatal("deleted instance still there")
	}

	evs := d.Events()
	want := "CREATED STARTED HEALTHY UNHEALTHY PAUSED RESUMED STANDBY STARTED UPDATED RENAMED EXITED STARTED DIED DELETED"
	if got := strings.Join(actions(evs), " "); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	for i := 1; i < len(evs); i++ {
		if !evs[i].Time.AsTime().After(evs[i-1].Time.AsTime()) {
			t.Fatalf("event times not increasing at %d", i)
		}
		if evs[i].Id != evs[0].Id {
			t.Fatalf("event %d has id %s, want %s", i, evs[i].Id, evs[0].Id)
		}
	}
	if evs[1].Attributes["ip"] != "10.0.0.5" {
		t.Fatalf("STARTED attributes %v", evs[1].Attributes)
	}
	if evs[3].Attributes["failing_streak"] != "3" {
		t.Fatalf("UNHEALTHY attributes %v", evs[3].Attributes)
	}
	if evs[6].Attributes["idle_seconds"] != "600" {
		t.Fatalf("STANDBY attributes %v", evs[6].Attributes)
	}
	wake := evs[7]
	if !strings.HasPrefix(wake.Message, "Resumed instance from standby") || !strings.Contains(wake.Message, "port 8080") ||
		wake.Attributes["woken_by_port"] != "8080" {
		t.Fatalf("wake event %v", wake)
	}
	if evs[9].Name != "www" || evs[9].Attributes["previous_name"] != "web" {
		t.Fatalf("RENAMED event %v", evs[9])
	}
	if evs[10].Attributes["exit_code"] != "3" {
		t.Fatalf("EXITED event %v", evs[10])
	}

	// Quiet mutations change state but record nothing.
	d.EmitQuietly(true)
	d.CreateInstance(running("quiet", ""))
	d.EmitQuietly(false)
	if d.Instance("quiet") == nil || len(d.Events()) != len(evs) {
		t.Fatal("EmitQuietly did not suppress events")
	}
}

func TestStartStandbyStopRPCs(t *testing.T) {
	d := newTestDaemon(t)
	c := unixClient(t, serveUnix(t, d))
	ctx := testCtx(t)
	d.CreateInstance(&dicerpb.Instance{
		Name: "vm", Ip: "10.0.0.9",
		HealthCheck: &dicerpb.HealthCheck{Probe: &dicerpb.HealthCheck_Http{Http: &dicerpb.HealthCheckHTTP{Port: 80, Path: "/"}}},
	})

	_, err := c.StandbyInstance(ctx, &dicerpb.StandbyInstanceRequest{Name: "vm"})
	wantCode(t, err, codes.FailedPrecondition, "")
	_, err = c.StopInstance(ctx, &dicerpb.StopInstanceRequest{Name: "vm"})
	wantCode(t, err, codes.FailedPrecondition, "")
	_, err = c.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: "nope"})
	wantCode(t, err, codes.NotFound, "")

	inst, err := c.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: "vm"})
	if err != nil || inst.State != dicerpb.InstanceState_INSTANCE_STATE_RUNNING ||
		inst.Health.GetStatus() != dicerpb.HealthStatus_HEALTH_STATUS_STARTING || inst.StartTime == nil {
		t.Fatalf("StartInstance = %v, %v", inst, err)
	}
	_, err = c.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: "vm"})
	wantCode(t, err, codes.FailedPrecondition, "")

	inst, err = c.StandbyInstance(ctx, &dicerpb.StandbyInstanceRequest{Name: "vm"})
	if err != nil || inst.State != dicerpb.InstanceState_INSTANCE_STATE_STANDBY || inst.Health != nil {
		t.Fatalf("StandbyInstance = %v, %v", inst, err)
	}
	inst, err = c.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: inst.Id})
	if err != nil || inst.State != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		t.Fatalf("StartInstance from standby = %v, %v", inst, err)
	}
	inst, err = c.StopInstance(ctx, &dicerpb.StopInstanceRequest{Name: "vm"})
	if err != nil || inst.State != dicerpb.InstanceState_INSTANCE_STATE_STOPPED {
		t.Fatalf("StopInstance = %v, %v", inst, err)
	}

	evs := d.Events()
	if got, want := strings.Join(actions(evs), " "), "CREATED STARTED STANDBY STARTED STOPPED"; got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
	if evs[1].Message != "Started instance" || evs[1].Attributes["ip"] != "10.0.0.9" {
		t.Fatalf("start event %v", evs[1])
	}
	if evs[3].Message != "Resumed instance from standby" {
		t.Fatalf("resume event %v", evs[3])
	}

	d.SetCallError("StartInstance", status.Error(codes.ResourceExhausted, "no memory"))
	_, err = c.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: "vm"})
	wantCode(t, err, codes.ResourceExhausted, "no memory")
	d.SetCallError("StartInstance", nil)
	if _, err = c.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: "vm"}); err != nil {
		t.Fatal(err)
	}
}

// ---- events --------------------------------------------------------------------

func TestHistoryBatching(t *testing.T) {
	d := newTestDaemon(t)
	c := unixClient(t, serveUnix(t, d))
	ctx := testCtx(t)

	// Empty history: one empty batch, caught up.
	s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resps, err := readAll(s)
	if err != nil || len(resps) != 1 || len(resps[0].Events) != 0 || !resps[0].CaughtUp {
		t.Fatalf("empty history: %v, %v", resps, err)
	}

	d.CreateInstance(&dicerpb.Instance{Name: "a"})
	for i := 1; i < 1200; i++ {
		d.UpdateInstance("a", func(*dicerpb.Instance) {})
	}
	s, err = c.GetEvents(ctx, &dicerpb.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resps, err = readAll(s)
	if err != nil {
		t.Fatal(err)
	}
	var sizes []string
	var all []*dicerpb.Event
	for i, r := range resps {
		sizes = append(sizes, fmt.Sprint(len(r.Events), r.CaughtUp))
		if r.CaughtUp != (i == len(resps)-1) {
			t.Fatalf("batch %d caught_up=%v", i, r.CaughtUp)
		}
		all = append(all, r.Events...)
	}
	if got := strings.Join(sizes, ","); got != "500 false,500 false,200 true" {
		t.Fatalf("batches %s", got)
	}
	for i := 1; i < len(all); i++ {
		if !all[i].Time.AsTime().After(all[i-1].Time.AsTime()) {
			t.Fatalf("history not oldest first at %d", i)
		}
	}
	if all[0].Action != dicerpb.EventAction_EVENT_ACTION_CREATED {
		t.Fatalf("first event %v", all[0])
	}
}

func TestHistoryKeepsLast10000(t *testing.T) {
	d := newTestDaemon(t)
	for i := 0; i < MaxHistory+50; i++ {
		d.Emit(&dicerpb.Event{Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE, Message: strconv.Itoa(i)})
	}
	evs := d.Events()
	if len(evs) != MaxHistory || evs[0].Message != "50" || evs[len(evs)-1].Message != strconv.Itoa(MaxHistory+49) {
		t.Fatalf("history has %d events, %s..%s", len(evs), evs[0].Message, evs[len(evs)-1].Message)
	}
}

func TestFollowNoGapNoDuplicate(t *testing.T) {
	d := newTestDaemon(t)
	c := unixClient(t, serveUnix(t, d))
	ctx := testCtx(t)

	emit := func(i int) {
		d.Emit(&dicerpb.Event{Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE, Id: "x", Name: "x", Message: strconv.Itoa(i)})
	}
	for i := 0; i < 300; i++ {
		emit(i)
	}
	// Emit more while the stream subscribes and reads the history; fewer
	// than FollowerBuffer so the follower is never cut.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 300; i < 500; i++ {
			emit(i)
		}
	}()
	s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	got := readHistory(t, s)
	for len(got) < 500 {
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		if len(r.Events) != 1 || r.CaughtUp {
			t.Fatalf("follow response %v", r)
		}
		got = append(got, r.Events...)
	}
	<-done
	for i, ev := range got {
		if ev.Message != strconv.Itoa(i) {
			t.Fatalf("event %d is %q", i, ev.Message)
		}
	}

	// Later mutations arrive in order, one per response.
	d.CreateInstance(running("b", "10.0.0.2"))
	d.SetState("b", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	var later []*dicerpb.Event
	for len(later) < 3 {
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, r.Events...)
	}
	if a := strings.Join(actions(later), " "); a != "CREATED STARTED STOPPED" || later[0].Name != "b" {
		t.Fatalf("followed %s", a)
	}
	if d.Followers() != 1 {
		t.Fatalf("Followers = %d", d.Followers())
	}
}

func TestEventFilters(t *testing.T) {
	d := newTestDaemon(t)
	c := unixClient(t, serveUnix(t, d))
	ctx := testCtx(t)

	a := d.CreateInstance(running("a", "10.0.0.1"))
	d.CreateInstance(&dicerpb.Instance{Name: "b"})
	d.AddNetwork(&dicerpb.Network{Name: "net"})
	d.UpdateInstance("a", func(*dicerpb.Instance) {})
	d.SetState("b", dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
	all := d.Events() // a CREATED, a STARTED, b CREATED, net CREATED, a UPDATED, b STARTED

	get := func(req *dicerpb.GetEventsRequest) ([]string, error) {
		t.Helper()
		s, err := c.GetEvents(ctx, req)
		if err != nil {
			return nil, err
		}
		resps, err := readAll(s)
		var out []string
		for _, r := range resps {
			for _, ev := range r.Events {
				out = append(out, ev.Name+":"+strings.TrimPrefix(ev.Action.String(), "EVENT_ACTION_"))
			}
		}
		return out, err
	}
	check := func(name string, req *dicerpb.GetEventsRequest, want string) {
		t.Helper()
		got, err := get(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("%s: got %s, want %s", name, strings.Join(got, " "), want)
		}
	}
	check("all", &dicerpb.GetEventsRequest{}, "a:CREATED a:STARTED b:CREATED net:CREATED a:UPDATED b:STARTED")
	check("since is inclusive", &dicerpb.GetEventsRequest{Since: all[3].Time}, "net:CREATED a:UPDATED b:STARTED")
	check("since after all", &dicerpb.GetEventsRequest{Since: timestamppb.New(all[5].Time.AsTime().Add(time.Second))}, "")
	check("limit", &dicerpb.GetEventsRequest{Limit: 2}, "a:UPDATED b:STARTED")
	check("limit over size", &dicerpb.GetEventsRequest{Limit: 100}, "a:CREATED a:STARTED b:CREATED net:CREATED a:UPDATED b:STARTED")
	check("kind", &dicerpb.GetEventsRequest{Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE, Limit: 3}, "b:CREATED a:UPDATED b:STARTED")
	check("network kind", &dicerpb.GetEventsRequest{Kind: dicerpb.EventKind_EVENT_KIND_NETWORK}, "net:CREATED")
	check("name", &dicerpb.GetEventsRequest{Name: "b"}, "b:CREATED b:STARTED")
	check("id", &dicerpb.GetEventsRequest{Id: a.Id, Since: all[1].Time}, "a:STARTED a:UPDATED")
	check("since and limit", &dicerpb.GetEventsRequest{Since: all[1].Time, Limit: 10, Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE},
		"a:STARTED b:CREATED a:UPDATED b:STARTED")

	_, err := get(&dicerpb.GetEventsRequest{Limit: -1})
	wantCode(t, err, codes.InvalidArgument, "")

	// A follower with a filter only gets matching later events.
	s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{Name: "b", Follow: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if h := readHistory(t, s); len(h) != 1 || h[0].Action != dicerpb.EventAction_EVENT_ACTION_STARTED {
		t.Fatalf("history %v", h)
	}
	d.UpdateInstance("a", func(*dicerpb.Instance) {})
	d.UpdateInstance("b", func(*dicerpb.Instance) {})
	r, err := s.Recv()
	if err != nil || r.Events[0].Name != "b" || r.Events[0].Action != dicerpb.EventAction_EVENT_ACTION_UPDATED {
		t.Fatalf("followed %v, %v", r, err)
	}
}

func TestCutFollowers(t *testing.T) {
	d := newTestDaemon(t)
	c := unixClient(t, serveUnix(t, d))
	ctx := testCtx(t)

	s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	readHistory(t, s)
	if err := d.WaitFollowers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	d.CutFollowers()
	if n := d.Followers(); n != 0 {
		t.Fatalf("Followers after cut = %d", n)
	}
	_, err = s.Recv()
	wantCode(t, err, codes.ResourceExhausted, "")

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := d.WaitFollowers(short, 1); err == nil {
		t.Fatal("WaitFollowers(1) succeeded with no follower")
	}
}

func TestSlowFollowerIsCut(t *testing.T) {
	d := newTestDaemon(t)
	// The smallest windows (which also turn off BDP growth), so the daemon's
	// sends block soon on a client that does not read.
	c := unixClient(t, serveUnix(t, d), grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	ctx := testCtx(t)

	s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	readHistory(t, s)
	if err := d.WaitFollowers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	emitted := 0
	for ; emitted < 200000 && d.Followers() == 1; emitted++ {
		d.Emit(&dicerpb.Event{Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE, Message: strconv.Itoa(emitted)})
	}
	if d.Followers() != 0 {
		t.Fatalf("follower not cut after %d unread events", emitted)
	}
	received := 0
	for {
		r, err := s.Recv()
		if err != nil {
			wantCode(t, err, codes.ResourceExhausted, "")
			break
		}
		if r.Events[0].Message != strconv.Itoa(received) {
			t.Fatalf("event %d is %q", received, r.Events[0].Message)
		}
		received++
	}
	// The cut came when the buffer of FollowerBuffer events was full and one
	// more arrived; the buffered ones may or may not have been sent.
	if behind := emitted - received; behind < 1 || behind > FollowerBuffer+1 {
		t.Fatalf("emitted %d, received %d", emitted, received)
	}
	t.Logf("cut after %d events, %d received", emitted, received)
}

// ---- TCP -----------------------------------------------------------------------

var tokenRE = regexp.MustCompile(`^dicer_[a-z2-7]{52}_[0-9a-f]{64}$`)

func TestTCPTokensAndScopes(t *testing.T) {
	d := newTestDaemon(t)
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("addr %s", addr)
	}
	ctx := testCtx(t)
	fp := d.Fingerprint()
	d.CreateInstance(running("web", "10.0.0.1"))

	caddy := d.AddToken("caddy")
	reader := d.AddToken("reader", "events:read")
	writer := d.AddToken("writer", "instances:write")
	for _, tok := range []string{caddy, reader, writer} {
		if !tokenRE.MatchString(tok) || !strings.HasSuffix(tok, "_"+fp) {
			t.Fatalf("token %q", tok)
		}
	}

	c := tcpClient(t, addr, fp, bearer(caddy))
	hi, err := c.GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hi.Token != "caddy" || hi.Fingerprint != fp || len(hi.ListenerAddresses) != 1 || hi.ListenerAddresses[0] != addr || hi.Version != Version {
		t.Fatalf("GetHostInfo = %v", hi)
	}
	if l, err := c.ListInstances(ctx, &dicerpb.ListInstancesRequest{}); err != nil || len(l.Instances) != 1 {
		t.Fatalf("ListInstances = %v, %v", l, err)
	}
	s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resps, err := readAll(s); err != nil || len(resps) != 1 || len(resps[0].Events) != 2 {
		t.Fatalf("GetEvents = %v, %v", resps, err)
	}

	// Only the secret counts: no fingerprint suffix, surrounding blanks.
	secretOnly := caddy[:len(caddy)-65]
	for _, tok := range []string{secretOnly, "  " + caddy + " "} {
		if _, err := tcpClient(t, addr, fp, bearer(tok)).GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{}); err != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
	}

	// Missing, malformed and unknown tokens.
	var unknownSecret [52]byte
	for i := range unknownSecret {
		unknownSecret[i] = 'a'
	}
	bad := map[string]credentials.PerRPCCredentials{
		"missing":         nil,
		"unknown":         bearer("dicer_" + string(unknownSecret[:]) + "_" + fp),
		"no prefix":       bearer(caddy[len("dicer_"):]),
		"short secret":    bearer("dicer_abc_" + fp),
		"bad fingerprint": bearer(secretOnly + "_" + strings.ToUpper(fp)),
		"empty suffix":    bearer(secretOnly + "_"),
		"bad char":        bearer("dicer_" + strings.Repeat("a", 40) + "-b"),
		"lowercase":       rawAuth("bearer " + caddy),
		"no scheme":       rawAuth(caddy),
	}
	for name, auth := range bad {
		bc := tcpClient(t, addr, fp, auth)
		_, err := bc.GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
		if st, _ := status.FromError(err); st.Code() != codes.Unauthenticated || st.Message() != "unauthenticated" {
			t.Fatalf("%s: GetHostInfo error %v", name, err)
		}
		s, err := bc.GetEvents(ctx, &dicerpb.GetEventsRequest{})
		if err == nil {
			_, err = s.Recv()
		}
		wantCode(t, err, codes.Unauthenticated, "unauthenticated")
	}

	// Scopes.
	rc := tcpClient(t, addr, fp, bearer(reader))
	_, err = rc.ListInstances(ctx, &dicerpb.ListInstancesRequest{})
	wantCode(t, err, codes.PermissionDenied, `token "reader" lacks scope instances:read`)
	if hi, err := rc.GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{}); err != nil || hi.Token != "reader" {
		t.Fatalf("GetHostInfo needs no scope: %v, %v", hi, err)
	}
	if s, err := rc.GetEvents(ctx, &dicerpb.GetEventsRequest{}); err != nil {
		t.Fatal(err)
	} else if _, err := readAll(s); err != nil {
		t.Fatalf("events:read token: %v", err)
	}

	wc := tcpClient(t, addr, fp, bearer(writer))
	if _, err := wc.GetInstance(ctx, &dicerpb.GetInstanceRequest{Name: "web"}); err != nil {
		t.Fatalf("instances:write should grant read: %v", err)
	}
	if _, err := wc.StopInstance(ctx, &dicerpb.StopInstanceRequest{Name: "web"}); err != nil {
		t.Fatal(err)
	}
	_, err = wc.ListNetworks(ctx, &dicerpb.ListNetworksRequest{})
	wantCode(t, err, codes.PermissionDenied, `token "writer" lacks scope networks:read`)
	s, err = wc.GetEvents(ctx, &dicerpb.GetEventsRequest{})
	if err == nil {
		_, err = s.Recv()
	}
	wantCode(t, err, codes.PermissionDenied, `token "writer" lacks scope events:read`)
	_, err = rc.StartInstance(ctx, &dicerpb.StartInstanceRequest{Name: "web"})
	wantCode(t, err, codes.PermissionDenied, `token "reader" lacks scope instances:write`)

	// The socket needs no token and reports no token name.
	uc := unixClient(t, serveUnix(t, d))
	hi, err = uc.GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
	if err != nil || hi.Token != "" || hi.Fingerprint != fp || hi.ListenerAddresses[0] != addr {
		t.Fatalf("socket GetHostInfo = %v, %v", hi, err)
	}
}

func TestTCPCertificateAndPinning(t *testing.T) {
	d := newTestDaemon(t)
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	fp := d.Fingerprint()
	if len(fp) != 64 || strings.ToLower(fp) != fp {
		t.Fatalf("fingerprint %q", fp)
	}

	block, _ := pem.Decode(d.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatal("CertPEM is not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	if hex.EncodeToString(sum[:]) != fp {
		t.Fatal("CertPEM does not match Fingerprint")
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() || cert.Subject.CommonName != "dicerd" ||
		len(cert.DNSNames)+len(cert.IPAddresses)+len(cert.URIs)+len(cert.EmailAddresses) != 0 ||
		len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || cert.NotAfter.Year() != 9999 {
		t.Fatalf("certificate %+v", cert)
	}

	tok := d.AddToken("caddy")
	if _, err := tcpClient(t, addr, fp, bearer(tok)).GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{}); err != nil {
		t.Fatalf("pinned client: %v", err)
	}
	wrong := strings.Repeat("0", 64)
	_, err = tcpClient(t, addr, wrong, bearer(tok)).GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
	if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(err.Error(), "fingerprint") {
		t.Fatalf("wrong pin: %v", err)
	}
	// Normal verification fails: self-signed, no names.
	_, err = dial(t, "passthrough:///"+addr,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13})),
		grpc.WithPerRPCCredentials(bearer(tok))).GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
	wantCode(t, err, codes.Unavailable, "")

	// TLS 1.3 only.
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS12})
	if err == nil {
		conn.Close()
		t.Fatal("TLS 1.2 handshake succeeded")
	}
}

func TestNewWithCertificate(t *testing.T) {
	// A CA-issued-like certificate with an IP SAN, as with server.crt_file.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "daemon"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewWithCertificate(tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tok := d.AddToken("caddy", "instances:read")
	if !regexp.MustCompile(`^dicer_[a-z2-7]{52}$`).MatchString(tok) {
		t.Fatalf("token %q should have no fingerprint", tok)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(d.CertPEM()) {
		t.Fatal("bad CertPEM")
	}
	c := dial(t, addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool})),
		grpc.WithPerRPCCredentials(bearer(tok)))
	if _, err := c.ListInstances(testCtx(t), &dicerpb.ListInstancesRequest{}); err != nil {
		t.Fatalf("CA-verified client: %v", err)
	}
}

// ---- lifecycle -----------------------------------------------------------------

func TestStopRestart(t *testing.T) {
	d := newTestDaemon(t)
	path := serveUnix(t, d)
	addr, err := d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	fp := d.Fingerprint()
	tok := d.AddToken("caddy")
	d.CreateInstance(running("web", "10.0.0.1"))

	uc := unixClient(t, path)
	tc := tcpClient(t, addr, fp, bearer(tok))
	var streams []grpc.ServerStreamingClient[dicerpb.GetEventsResponse]
	for _, c := range []dicerpb.DaemonServiceClient{uc, tc} {
		s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		readHistory(t, s)
		streams = append(streams, s)
	}
	if err := d.WaitFollowers(ctx, 2); err != nil {
		t.Fatal(err)
	}

	d.Stop()
	if n := d.Followers(); n != 0 {
		t.Fatalf("Followers after Stop = %d", n)
	}
	for i, s := range streams {
		_, err := s.Recv()
		if err == nil || errors.Is(err, io.EOF) {
			t.Fatalf("stream %d after Stop: %v", i, err)
		}
		wantCode(t, err, codes.Unavailable, "")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket after Stop: %v", err)
	}
	_, err = uc.ListInstances(ctx, &dicerpb.ListInstancesRequest{})
	wantCode(t, err, codes.Unavailable, "")
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("TCP listener still accepts after Stop")
	}

	// State changes while the daemon is down are not seen by anyone.
	d.SetState("web", dicerpb.InstanceState_INSTANCE_STATE_STANDBY, nil)

	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	// A new connection to the same address, pinned to the same fingerprint.
	tc2 := tcpClient(t, addr, fp, bearer(tok))
	hi, err := tc2.GetHostInfo(ctx, &dicerpb.GetHostInfoRequest{})
	if err != nil || hi.Fingerprint != fp || hi.ListenerAddresses[0] != addr {
		t.Fatalf("after Restart: %v, %v", hi, err)
	}
	inst, err := tc2.GetInstance(ctx, &dicerpb.GetInstanceRequest{Name: "web"})
	if err != nil || inst.State != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
		t.Fatalf("state after Restart: %v, %v", inst, err)
	}
	// The old clients reconnect by themselves.
	for _, c := range []dicerpb.DaemonServiceClient{uc, tc} {
		s, err := c.GetEvents(ctx, &dicerpb.GetEventsRequest{}, grpc.WaitForReady(true))
		if err != nil {
			t.Fatal(err)
		}
		resps, err := readAll(s)
		if err != nil {
			t.Fatal(err)
		}
		var evs []*dicerpb.Event
		for _, r := range resps {
			evs = append(evs, r.Events...)
		}
		if got := strings.Join(actions(evs), " "); got != "CREATED STARTED STANDBY" {
			t.Fatalf("history after Restart: %s", got)
		}
	}

	// Restart while serving also works.
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	// (A client that has not yet noticed the old connection close may see
	// one RPC fail with UNAVAILABLE, as with a real daemon; use a new one.)
	if _, err := tcpClient(t, addr, fp, bearer(tok)).ListInstances(ctx, &dicerpb.ListInstancesRequest{}); err != nil {
		t.Fatal(err)
	}

	d.Close()
	if err := d.Restart(); err == nil {
		t.Fatal("Restart after Close succeeded")
	}
}

// ---- hello ---------------------------------------------------------------------

func TestServeHello(t *testing.T) {
	addr, stop, err := ListenHello("127.0.0.1:0", "web-1")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/any/path")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from web-1\n" {
		t.Fatalf("body %q", body)
	}
	stop()
	stop() // idempotent
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("still listening after stop")
	}
	for _, a := range []string{"0.0.0.0:0", "[::1]:0", "10.0.0.1:80", "localhost:0"} {
		if stop, err := ServeHello(a, "x"); err == nil {
			stop()
			t.Fatalf("ServeHello(%s) accepted a non-127/8 address", a)
		}
	}
}
