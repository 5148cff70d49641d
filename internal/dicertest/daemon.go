// Package dicertest runs an in-memory stand-in for the Dicer daemon that
// serves the real dicerd.v1 gRPC wire API (the subset in package dicerpb),
// so the plugin can be tested without KVM.
//
// A Daemon keeps its instances, networks, tokens, certificate and event
// history across Stop and Restart of its listeners, as the real daemon keeps
// them across restarts. Tests drive it from Go: every mutation records the
// events a real daemon would and publishes them to GetEvents followers.
//
// The helper methods that name an instance (UpdateInstance, SetState, ...)
// panic when it does not exist: that is a bug in the test, not a condition
// to handle.
package dicertest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

const (
	// Version is what GetHostInfo reports as the daemon version.
	Version = "dicertest"
	// MaxHistory is how many events the history keeps (the newest ones).
	MaxHistory = 10000
	// HistoryBatch is the largest number of events in one history response.
	HistoryBatch = 500
	// FollowerBuffer is how many events a follower may fall behind before
	// its stream is ended with RESOURCE_EXHAUSTED.
	FollowerBuffer = 256
)

// Daemon is an in-memory Dicer daemon. Create it with New; it is safe for
// concurrent use.
type Daemon struct {
	// Fixed at New.
	cert        tls.Certificate
	certPEM     []byte
	fingerprint string
	customCert  bool
	hostname    string

	// lmu guards the listeners. It is taken before mu, never after.
	lmu      sync.Mutex
	unixPath string // "" if never served on a socket
	tcpAddr  string // actual address; "" if never served on TCP
	unixSrv  *grpc.Server
	tcpSrv   *grpc.Server
	closed   bool

	// mu guards all daemon state.
	mu          sync.Mutex
	instances   []*dicerpb.Instance // creation order
	byName      map[string]*dicerpb.Instance
	byID        map[string]*dicerpb.Instance
	networks    []*dicerpb.Network
	history     []*dicerpb.Event
	lastTime    time.Time
	subs        map[*subscriber]struct{}
	subsChanged chan struct{} // closed and replaced whenever subs changes
	quiet       bool
	calls       map[string]int64
	tokens      map[[32]byte]*token
	callErrs    map[string]error
	listenAddr  string                                    // TCP address reported by GetHostInfo
	noCaughtUp  bool                                      // see WithholdCaughtUp
	getAnswer   func(*dicerpb.Instance) *dicerpb.Instance // see AnswerGetInstance
}

// New returns a daemon with no instances, networks or tokens, and a fresh
// self-signed certificate like the one the real daemon generates: ECDSA
// P-256, CN "dicerd", no SANs, server-auth EKU. It does not listen until
// ServeUnix or ServeTCP is called.
func New() *Daemon {
	cert, certPEM, err := selfSigned()
	if err != nil {
		panic("dicertest: " + err.Error())
	}
	return newDaemon(cert, certPEM, false)
}

// NewWithCertificate returns a daemon that serves cert over TCP instead of
// a generated one, like a daemon configured with server.crt_file: AddToken
// then omits the fingerprint suffix, and clients must verify the daemon
// against a CA. cert.Certificate[0] must be the leaf.
func NewWithCertificate(cert tls.Certificate) (*Daemon, error) {
	if len(cert.Certificate) == 0 {
		return nil, errors.New("dicertest: certificate has no leaf")
	}
	d := newDaemon(cert, pemCert(cert.Certificate[0]), true)
	if d.fingerprint == "" {
		return nil, errors.New("dicertest: cannot parse the leaf certificate")
	}
	return d, nil
}

func newDaemon(cert tls.Certificate, certPEM []byte, custom bool) *Daemon {
	host, _ := os.Hostname()
	return &Daemon{
		cert:        cert,
		certPEM:     certPEM,
		fingerprint: leafFingerprint(cert),
		customCert:  custom,
		hostname:    host,
		byName:      make(map[string]*dicerpb.Instance),
		byID:        make(map[string]*dicerpb.Instance),
		subs:        make(map[*subscriber]struct{}),
		subsChanged: make(chan struct{}),
		calls:       make(map[string]int64),
		tokens:      make(map[[32]byte]*token),
		callErrs:    make(map[string]error),
	}
}

// Fingerprint is the lowercase hex SHA-256 of the certificate's
// SubjectPublicKeyInfo (64 characters). It is the same for the life of the
// Daemon.
func (d *Daemon) Fingerprint() string { return d.fingerprint }

// CertPEM is the daemon's TLS certificate in PEM form.
func (d *Daemon) CertPEM() []byte { return append([]byte(nil), d.certPEM...) }

// ---- Listeners -------------------------------------------------------------

// ServeUnix serves plaintext gRPC without authentication on a unix socket at
// path, like the real daemon's socket. A stale socket file there is removed.
// It returns once the socket accepts connections.
func (d *Daemon) ServeUnix(path string) error {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	if d.closed {
		return errors.New("dicertest: daemon is closed")
	}
	if d.unixSrv != nil {
		return fmt.Errorf("dicertest: already serving on %s", d.unixPath)
	}
	srv, err := d.serveUnixLocked(path)
	if err != nil {
		return err
	}
	d.unixPath, d.unixSrv = path, srv
	return nil
}

// ServeTCP serves gRPC over TLS 1.3 with token authentication on addr (for
// example "127.0.0.1:0") and returns the actual address. It returns once the
// listener accepts connections.
func (d *Daemon) ServeTCP(addr string) (string, error) {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	if d.closed {
		return "", errors.New("dicertest: daemon is closed")
	}
	if d.tcpSrv != nil {
		return "", fmt.Errorf("dicertest: already serving on %s", d.tcpAddr)
	}
	srv, actual, err := d.serveTCPLocked(addr)
	if err != nil {
		return "", err
	}
	d.tcpAddr, d.tcpSrv = actual, srv
	return actual, nil
}

// Stop makes the daemon go away: it closes the listeners and every open
// connection and stream, and returns once every handler has returned.
// State is kept; Restart serves again.
func (d *Daemon) Stop() {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	d.stopLocked()
}

// Restart stops the daemon if it is serving, then serves again on the same
// unix path and the same TCP address (same port), with the same certificate.
func (d *Daemon) Restart() error {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	if d.closed {
		return errors.New("dicertest: daemon is closed")
	}
	d.stopLocked()
	var errs []error
	if d.unixPath != "" {
		srv, err := d.serveUnixLocked(d.unixPath)
		errs = append(errs, err)
		d.unixSrv = srv
	}
	if d.tcpAddr != "" {
		srv, _, err := d.serveTCPLocked(d.tcpAddr)
		errs = append(errs, err)
		d.tcpSrv = srv
	}
	return errors.Join(errs...)
}

// Close stops the daemon for good.
func (d *Daemon) Close() {
	d.lmu.Lock()
	defer d.lmu.Unlock()
	d.closed = true
	d.stopLocked()
}

func (d *Daemon) stopLocked() {
	for _, srv := range []*grpc.Server{d.unixSrv, d.tcpSrv} {
		if srv != nil {
			srv.Stop() // closes the listener (unlinking the socket) and all conns
		}
	}
	d.unixSrv, d.tcpSrv = nil, nil
}

func (d *Daemon) serveUnixLocked(path string) (*grpc.Server, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("dicertest: %w", err)
	}
	srv := d.newServer(false)
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

func (d *Daemon) serveTCPLocked(addr string) (*grpc.Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("dicertest: %w", err)
	}
	actual := ln.Addr().String()
	d.mu.Lock()
	d.listenAddr = actual
	d.mu.Unlock()
	srv := d.newServer(true)
	go func() { _ = srv.Serve(ln) }()
	return srv, actual, nil
}

func (d *Daemon) newServer(tcp bool) *grpc.Server {
	unary := []grpc.UnaryServerInterceptor{d.countUnary}
	stream := []grpc.StreamServerInterceptor{d.countStream}
	opts := []grpc.ServerOption{
		grpc.WaitForHandlers(true),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
	if tcp {
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{
			MinVersion:   tls.VersionTLS13,
			Certificates: []tls.Certificate{d.cert},
		})))
		unary = append(unary, d.authUnary)
		stream = append(stream, d.authStream)
	}
	unary = append(unary, d.failUnary)
	stream = append(stream, d.failStream)
	opts = append(opts, grpc.ChainUnaryInterceptor(unary...), grpc.ChainStreamInterceptor(stream...))
	srv := grpc.NewServer(opts...)
	dicerpb.RegisterDaemonServiceServer(srv, &service{d: d})
	return srv
}

// ---- Observability and fault injection -------------------------------------

// Calls reports how many times the RPC method (e.g. "GetInstance") has been
// called on any listener, counting calls refused by authentication too.
func (d *Daemon) Calls(method string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[method]
}

// Followers reports how many GetEvents streams with follow are open.
func (d *Daemon) Followers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.subs)
}

// WaitFollowers waits until exactly n GetEvents follow streams are open, or
// ctx is done.
func (d *Daemon) WaitFollowers(ctx context.Context, n int) error {
	for {
		d.mu.Lock()
		have, changed := len(d.subs), d.subsChanged
		d.mu.Unlock()
		if have == n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("dicertest: %d followers, want %d: %w", have, n, ctx.Err())
		}
	}
}

// SetCallError makes every later call of method (e.g. "StartInstance") fail
// with err, after authentication; a nil err clears it. err should be a gRPC
// status error.
func (d *Daemon) SetCallError(method string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err == nil {
		delete(d.callErrs, method)
	} else {
		d.callErrs[method] = err
	}
}

// EmitQuietly turns event recording off (true) or back on. While it is off,
// mutations change state without recording or publishing events, as if
// they happened while a client was not following.
func (d *Daemon) EmitQuietly(quiet bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.quiet = quiet
}

// Emit records ev (a clone) in the history and publishes it to followers,
// whatever EmitQuietly says. A nil Time is set to now; a set Time is kept,
// which lets a test produce events with equal timestamps.
func (d *Daemon) Emit(ev *dicerpb.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev = proto.Clone(ev).(*dicerpb.Event)
	if ev.Time == nil {
		ev.Time = timestamppb.New(d.nowLocked())
	}
	d.appendLocked(ev)
}

// Events returns a copy of the whole stored history, oldest first.
func (d *Daemon) Events() []*dicerpb.Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*dicerpb.Event, len(d.history))
	for i, ev := range d.history {
		out[i] = proto.Clone(ev).(*dicerpb.Event)
	}
	return out
}

// ---- Instances ---------------------------------------------------------------

// CreateInstance adds a clone of in and returns a clone of what is stored.
// An empty ID gets a random hex one; create_time (if unset) and update_time
// are set; an UNSPECIFIED state becomes STOPPED. It records CREATED and, for
// a RUNNING instance, STARTED with the attribute ip. A running instance
// with a health check and no health gets health STARTING. It panics if the
// name is taken.
func (d *Daemon) CreateInstance(in *dicerpb.Instance) *dicerpb.Instance {
	d.mu.Lock()
	defer d.mu.Unlock()
	if in.GetName() == "" {
		panic("dicertest: CreateInstance without a name")
	}
	if d.findLocked(in.GetName()) != nil {
		panic(fmt.Sprintf("dicertest: instance %q exists", in.GetName()))
	}
	inst := proto.Clone(in).(*dicerpb.Instance)
	if inst.Id == "" {
		inst.Id = randomHex(16)
	}
	now := d.nowLocked()
	if inst.CreateTime == nil {
		inst.CreateTime = timestamppb.New(now)
	}
	inst.UpdateTime = timestamppb.New(now)
	if inst.State == dicerpb.InstanceState_INSTANCE_STATE_UNSPECIFIED {
		inst.State = dicerpb.InstanceState_INSTANCE_STATE_STOPPED
	}
	d.instances = append(d.instances, inst)
	d.byName[inst.Name], d.byID[inst.Id] = inst, inst
	var attrs map[string]string
	if inst.ImageRef != "" {
		attrs = map[string]string{"image": inst.ImageRef}
	}
	d.instanceEventLocked(now, inst, dicerpb.EventAction_EVENT_ACTION_CREATED, "Created instance", attrs)
	if inst.State == dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		now = d.nowLocked()
		if inst.StartTime == nil {
			inst.StartTime = timestamppb.New(now)
		}
		if inst.HealthCheck != nil && inst.Health == nil {
			inst.Health = &dicerpb.Health{Status: dicerpb.HealthStatus_HEALTH_STATUS_STARTING, Check: inst.HealthCheck}
		}
		var attrs map[string]string
		if inst.Ip != "" {
			attrs = map[string]string{"ip": inst.Ip}
		}
		d.instanceEventLocked(now, inst, dicerpb.EventAction_EVENT_ACTION_STARTED, "Started instance", attrs)
	}
	return proto.Clone(inst).(*dicerpb.Instance)
}

// UpdateInstance applies mutate to the stored instance named name (or with
// that ID), bumps update_time and records UPDATED.
func (d *Daemon) UpdateInstance(name string, mutate func(*dicerpb.Instance)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inst := d.mustFindLocked(name)
	oldName, oldID := inst.Name, inst.Id
	mutate(inst)
	if inst.Name != oldName || inst.Id != oldID {
		panic("dicertest: UpdateInstance must not change the name or ID; use RenameInstance")
	}
	now := d.nowLocked()
	inst.UpdateTime = timestamppb.New(now)
	d.instanceEventLocked(now, inst, dicerpb.EventAction_EVENT_ACTION_UPDATED, "Updated instance", nil)
}

// SetState moves the instance to state s and records the event that fits,
// with attrs added to the event's attributes:
//
//   - RUNNING: from PAUSED, RESUMED; from STANDBY, STARTED with the message
//     "Resumed instance from standby" (", woken by a connection to port N"
//     when attrs has woken_by_port); otherwise STARTED with the attribute ip.
//     An "ip" attribute also sets the instance's ip. Every start (not an
//     un-pause) resets health to STARTING if the instance has a health check.
//   - STOPPED: STOPPED, or EXITED if attrs has exit_code.
//   - FAILED: DIED. PAUSED: PAUSED. STANDBY: STANDBY. RESTARTING: RESTARTING.
//   - STARTING, STOPPING, UNSPECIFIED: no event.
//
// An exit_code attribute also sets exit_code. Health is kept while RUNNING
// or PAUSED and cleared otherwise. Setting the current state does nothing.
func (d *Daemon) SetState(name string, s dicerpb.InstanceState, attrs map[string]string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.setStateLocked(d.mustFindLocked(name), s, attrs)
}

func (d *Daemon) setStateLocked(inst *dicerpb.Instance, s dicerpb.InstanceState, attrs map[string]string) {
	old := inst.State
	if old == s {
		return
	}
	attrs = cloneMap(attrs)
	now := d.nowLocked()
	ts := timestamppb.New(now)
	inst.State = s
	inst.UpdateTime = ts
	if v, ok := attrs["exit_code"]; ok {
		if n, err := strconv.ParseInt(v, 10, 32); err == nil {
			code := int32(n)
			inst.ExitCode = &code
		}
	}

	var action dicerpb.EventAction
	var msg string
	switch s {
	case dicerpb.InstanceState_INSTANCE_STATE_RUNNING:
		if old == dicerpb.InstanceState_INSTANCE_STATE_PAUSED {
			action, msg = dicerpb.EventAction_EVENT_ACTION_RESUMED, "Resumed instance"
			break
		}
		action = dicerpb.EventAction_EVENT_ACTION_STARTED
		if ip := attrs["ip"]; ip != "" {
			inst.Ip = ip
		}
		if old == dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
			msg = "Resumed instance from standby"
			if port := attrs["woken_by_port"]; port != "" {
				msg += ", woken by a connection to port " + port
			}
		} else {
			msg = "Started instance"
			inst.StartTime = ts
			inst.FinishTime = nil
			inst.ExitCode = nil
			inst.StateError = ""
			if inst.Ip != "" {
				if attrs == nil {
					attrs = map[string]string{}
				}
				if _, ok := attrs["ip"]; !ok {
					attrs["ip"] = inst.Ip
				}
			}
		}
		if inst.HealthCheck != nil {
			inst.Health = &dicerpb.Health{Status: dicerpb.HealthStatus_HEALTH_STATUS_STARTING, Check: inst.HealthCheck}
		} else {
			inst.Health = nil
		}
	case dicerpb.InstanceState_INSTANCE_STATE_STOPPED:
		inst.FinishTime = ts
		if _, ok := attrs["exit_code"]; ok {
			action, msg = dicerpb.EventAction_EVENT_ACTION_EXITED, "Instance exited with code "+attrs["exit_code"]
		} else {
			action, msg = dicerpb.EventAction_EVENT_ACTION_STOPPED, "Stopped instance"
		}
	case dicerpb.InstanceState_INSTANCE_STATE_FAILED:
		inst.FinishTime = ts
		action, msg = dicerpb.EventAction_EVENT_ACTION_DIED, "Instance died"
	case dicerpb.InstanceState_INSTANCE_STATE_PAUSED:
		action, msg = dicerpb.EventAction_EVENT_ACTION_PAUSED, "Paused instance"
	case dicerpb.InstanceState_INSTANCE_STATE_STANDBY:
		action, msg = dicerpb.EventAction_EVENT_ACTION_STANDBY, "Put instance on standby"
	case dicerpb.InstanceState_INSTANCE_STATE_RESTARTING:
		inst.RestartCount++
		action, msg = dicerpb.EventAction_EVENT_ACTION_RESTARTING, "Restarting instance"
	}
	if s != dicerpb.InstanceState_INSTANCE_STATE_RUNNING && s != dicerpb.InstanceState_INSTANCE_STATE_PAUSED {
		inst.Health = nil
	}
	if action != dicerpb.EventAction_EVENT_ACTION_UNSPECIFIED {
		d.instanceEventLocked(now, inst, action, msg, attrs)
	}
}

// SetHealth sets the instance's health status and records HEALTHY or
// UNHEALTHY (with the attribute failing_streak) on every call; STARTING
// records nothing and UNSPECIFIED clears health.
func (d *Daemon) SetHealth(name string, s dicerpb.HealthStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inst := d.mustFindLocked(name)
	now := d.nowLocked()
	ts := timestamppb.New(now)
	inst.UpdateTime = ts
	if s == dicerpb.HealthStatus_HEALTH_STATUS_UNSPECIFIED {
		inst.Health = nil
		return
	}
	if inst.Health == nil {
		inst.Health = &dicerpb.Health{Check: inst.HealthCheck}
	}
	h := inst.Health
	h.Status = s
	h.LastCheckTime = ts
	switch s {
	case dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY:
		h.FailingStreak = 0
		d.instanceEventLocked(now, inst, dicerpb.EventAction_EVENT_ACTION_HEALTHY, "Instance is healthy", nil)
	case dicerpb.HealthStatus_HEALTH_STATUS_UNHEALTHY:
		h.FailingStreak = max(h.FailingStreak+1, inst.GetHealthCheck().GetRetries())
		d.instanceEventLocked(now, inst, dicerpb.EventAction_EVENT_ACTION_UNHEALTHY, "Instance is unhealthy",
			map[string]string{"failing_streak": strconv.Itoa(int(h.FailingStreak))})
	}
}

// RenameInstance renames an instance and records RENAMED (under the new
// name) with the attribute previous_name. It panics if newName is taken.
func (d *Daemon) RenameInstance(oldName, newName string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inst := d.mustFindLocked(oldName)
	if other := d.findLocked(newName); other != nil && other != inst {
		panic(fmt.Sprintf("dicertest: instance %q exists", newName))
	}
	prev := inst.Name
	inst.Name = newName
	delete(d.byName, prev)
	d.byName[newName] = inst
	now := d.nowLocked()
	inst.UpdateTime = timestamppb.New(now)
	d.instanceEventLocked(now, inst, dicerpb.EventAction_EVENT_ACTION_RENAMED,
		"Renamed instance from "+prev+" to "+newName, map[string]string{"previous_name": prev})
}

// DeleteInstance removes an instance and records DELETED.
func (d *Daemon) DeleteInstance(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inst := d.mustFindLocked(name)
	for i, x := range d.instances {
		if x == inst {
			d.instances = append(d.instances[:i:i], d.instances[i+1:]...)
			break
		}
	}
	delete(d.byName, inst.Name)
	delete(d.byID, inst.Id)
	d.instanceEventLocked(d.nowLocked(), inst, dicerpb.EventAction_EVENT_ACTION_DELETED, "Deleted instance", nil)
}

// Instance returns a clone of the instance with that name or ID, or nil.
func (d *Daemon) Instance(name string) *dicerpb.Instance {
	d.mu.Lock()
	defer d.mu.Unlock()
	if inst := d.findLocked(name); inst != nil {
		return proto.Clone(inst).(*dicerpb.Instance)
	}
	return nil
}

// AddNetwork adds a clone of n, replacing a network of the same name. An
// empty ID gets a random one; a new network records a network CREATED event.
func (d *Daemon) AddNetwork(n *dicerpb.Network) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n = proto.Clone(n).(*dicerpb.Network)
	if n.Id == "" {
		n.Id = randomHex(16)
	}
	now := d.nowLocked()
	if n.CreateTime == nil {
		n.CreateTime = timestamppb.New(now)
	}
	n.UpdateTime = timestamppb.New(now)
	for i, x := range d.networks {
		if x.Name == n.Name {
			d.networks[i] = n
			return
		}
	}
	d.networks = append(d.networks, n)
	d.recordLocked(&dicerpb.Event{
		Time: timestamppb.New(now), Kind: dicerpb.EventKind_EVENT_KIND_NETWORK,
		Id: n.Id, Name: n.Name, Action: dicerpb.EventAction_EVENT_ACTION_CREATED, Message: "Created network",
	})
}

func (d *Daemon) findLocked(nameOrID string) *dicerpb.Instance {
	if nameOrID == "" {
		return nil
	}
	if inst, ok := d.byName[nameOrID]; ok {
		return inst
	}
	return d.byID[nameOrID]
}

func (d *Daemon) mustFindLocked(name string) *dicerpb.Instance {
	inst := d.findLocked(name)
	if inst == nil {
		panic(fmt.Sprintf("dicertest: no instance %q", name))
	}
	return inst
}

func (d *Daemon) findNetworkLocked(nameOrID string) *dicerpb.Network {
	for _, n := range d.networks {
		if n.Name == nameOrID {
			return n
		}
	}
	for _, n := range d.networks {
		if n.Id == nameOrID {
			return n
		}
	}
	return nil
}

// nowLocked returns the current time, strictly after every time it
// returned before, so events keep distinct, increasing timestamps.
func (d *Daemon) nowLocked() time.Time {
	t := time.Now().UTC()
	if !t.After(d.lastTime) {
		t = d.lastTime.Add(time.Nanosecond)
	}
	d.lastTime = t
	return t
}

func (d *Daemon) instanceEventLocked(now time.Time, inst *dicerpb.Instance, action dicerpb.EventAction, msg string, attrs map[string]string) {
	d.recordLocked(&dicerpb.Event{
		Time:       timestamppb.New(now),
		Kind:       dicerpb.EventKind_EVENT_KIND_INSTANCE,
		Id:         inst.Id,
		Name:       inst.Name,
		Action:     action,
		Message:    msg,
		Attributes: cloneMap(attrs),
	})
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
