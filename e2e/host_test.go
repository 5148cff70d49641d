//go:build e2e && linux

package e2e

import (
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

// guestPort is the port each instance's service listens on.
const guestPort = 8080

// wakeDelay is how long the simulator takes to resume an instance from
// standby, so that a woken request is measurably slow.
const wakeDelay = 300 * time.Millisecond

// instance is what a scenario asks a Dicer host to run: a service that
// answers every request with "hello from <name>" on guestPort.
type instance struct {
	name   string
	labels map[string]string
	// publish publishes guestPort on a host port.
	publish bool
	// standbyAfter, if set, lets the instance go on standby when idle and
	// be woken by a connection to its published port.
	standbyAfter time.Duration
}

// dicerHost is the Dicer host the scenarios drive: the simulator in the
// suite's network namespace, or a real Dicer daemon. Its methods fail the
// test on error.
type dicerHost interface {
	// settings returns the Caddyfile lines that reach the daemon: address,
	// and token if needed.
	settings() string
	// tcpListener returns the daemon's TCP listener address and a token
	// for it with read-only scopes whose fingerprint pins the daemon's
	// certificate.
	tcpListener(t *testing.T) (addr, token string)
	// selector narrows a scenario's selector to the instances of this run
	// (on a shared real daemon); the simulator returns it as is.
	selector(s string) string
	// instanceName is the name run gives the instance named short in a
	// scenario.
	instanceName(short string) string
	// run creates and starts an instance and returns its name, once it is
	// running and serving.
	run(t *testing.T, in instance) string
	stop(t *testing.T, name string)
	start(t *testing.T, name string)
	pause(t *testing.T, name string)
	resume(t *testing.T, name string)
	// standby puts an instance on standby: with standbyAfter, as its idle
	// rule does; without, by hand.
	standby(t *testing.T, name string)
	remove(t *testing.T, name string)
	// state is the instance's state as the daemon reports it.
	state(t *testing.T, name string) dicerpb.InstanceState
	// events are the daemon's instance events about name, oldest first.
	events(t *testing.T, name string) []*dicerpb.Event
	// hostPort is the host port that publishes the instance's guestPort.
	hostPort(t *testing.T, name string) int
}

// simHost is the Dicer host simulator: the test daemon (dicertest, serving
// Dicer's wire API on a unix socket) with a dicertest.Host that runs each
// instance as a process (this test binary in hello mode) bound to its own
// address on sim0, relays published ports from the gateway, and wakes
// instances on standby through them.
type simHost struct {
	d    *dicertest.Daemon
	h    *dicertest.Host
	sock string
}

// newSimHost returns a fresh simulated host for t, torn down when t ends:
// every instance process killed, the daemon closed.
func newSimHost(t *testing.T) dicerHost {
	t.Helper()
	dir, err := os.MkdirTemp("", "cdsim") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &simHost{d: dicertest.New(), sock: filepath.Join(dir, "dicer.sock")}
	t.Cleanup(s.d.Close)
	if err := s.d.ServeUnix(s.sock); err != nil {
		t.Fatal(err)
	}
	s.h, err = dicertest.NewHost(s.d, dicertest.HostConfig{
		Subnet:    subnet,
		Gateway:   gatewayIP,
		Command:   helloCommand,
		WakeDelay: wakeDelay,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.h.Close)
	return s
}

// helloCommand runs an instance's service: this test binary in hello mode,
// killed with the test binary if that dies first.
func helloCommand(name, addr string) *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envHelloName+"="+name, envHelloAddr+"="+addr)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// requireSim returns the simulator, or skips t against a real daemon.
func requireSim(t *testing.T, h dicerHost) *simHost {
	t.Helper()
	s, ok := h.(*simHost)
	if !ok {
		t.Skip("needs control of the daemon itself: simulator only")
	}
	return s
}

func (s *simHost) settings() string { return "address unix:" + s.sock }

func (s *simHost) tcpListener(t *testing.T) (string, string) {
	t.Helper()
	// Loopback, as the Dicer docs' Caddy example binds it.
	addr, err := s.d.ServeTCP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return addr, s.d.AddToken("caddy", "instances:read", "events:read", "networks:read")
}

func (s *simHost) selector(sel string) string { return sel }

func (s *simHost) instanceName(short string) string { return short }

func (s *simHost) run(t *testing.T, in instance) string {
	t.Helper()
	ip, err := newInstanceIP()
	if err != nil {
		t.Fatal(err)
	}
	spec := dicertest.InstanceSpec{
		Name:         in.name,
		IP:           ip,
		Port:         guestPort,
		Labels:       maps.Clone(in.labels),
		StandbyAfter: in.standbyAfter,
	}
	if in.publish {
		spec.Publish = []*dicerpb.PortMapping{{GuestPort: guestPort}} // a free host port
	}
	if _, err := s.h.Run(spec); err != nil {
		t.Fatal(err)
	}
	return in.name
}

func (s *simHost) do(t *testing.T, f func(string) error, name string) {
	t.Helper()
	if err := f(name); err != nil {
		t.Fatal(err)
	}
}

func (s *simHost) stop(t *testing.T, name string)    { t.Helper(); s.do(t, s.h.Stop, name) }
func (s *simHost) start(t *testing.T, name string)   { t.Helper(); s.do(t, s.h.Start, name) }
func (s *simHost) pause(t *testing.T, name string)   { t.Helper(); s.do(t, s.h.Pause, name) }
func (s *simHost) resume(t *testing.T, name string)  { t.Helper(); s.do(t, s.h.Resume, name) }
func (s *simHost) standby(t *testing.T, name string) { t.Helper(); s.do(t, s.h.Standby, name) }
func (s *simHost) remove(t *testing.T, name string)  { t.Helper(); s.do(t, s.h.Delete, name) }

func (s *simHost) state(t *testing.T, name string) dicerpb.InstanceState {
	t.Helper()
	inst := s.d.Instance(name)
	if inst == nil {
		t.Fatalf("no instance %s", name)
	}
	return inst.GetState()
}

func (s *simHost) events(_ *testing.T, name string) []*dicerpb.Event {
	var out []*dicerpb.Event
	for _, ev := range s.d.Events() {
		if ev.GetKind() == dicerpb.EventKind_EVENT_KIND_INSTANCE && ev.GetName() == name {
			out = append(out, ev)
		}
	}
	return out
}

func (s *simHost) hostPort(t *testing.T, name string) int {
	t.Helper()
	for _, pm := range s.d.Instance(name).GetPorts() {
		if pm.GetGuestPort() == guestPort {
			return int(pm.GetHostPort())
		}
	}
	t.Fatalf("instance %s publishes no port %d", name, guestPort)
	return 0
}

// dials returns the two addresses Caddy may dial for an instance: its own
// (ip:guestPort) and, if it publishes guestPort, the gateway's published
// port.
func (s *simHost) dials(t *testing.T, name string) (direct, published string) {
	t.Helper()
	inst := s.d.Instance(name)
	direct = net.JoinHostPort(inst.GetIp(), strconv.Itoa(guestPort))
	if len(inst.GetPorts()) > 0 {
		published = net.JoinHostPort(gatewayIP, strconv.Itoa(s.hostPort(t, name)))
	}
	return direct, published
}

// processState returns the state letter of the instance's process from
// /proc (R running or S sleeping, T stopped), or "" without a process.
func (s *simHost) processState(name string) string {
	pid := s.h.Pid(name)
	if pid == 0 {
		return ""
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) S ...: the state follows the last ')'.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return string(b[i+2])
		}
	}
	return ""
}
