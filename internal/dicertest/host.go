//go:build unix

package dicertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// Host simulates a Dicer host around a Daemon, for end-to-end tests: each
// instance is a real process that serves on the instance's address, each
// published TCP port is relayed from the host to the instance, and an
// instance with standby_after that is on standby is woken by a connection to
// one of its published ports, as the real daemon does (see the package
// notes on Dicer's networking and standby wake).
//
// State maps to processes as follows: running = the process runs; paused
// and standby = the process is stopped with SIGSTOP; resumed or woken =
// SIGCONT; stopped = the process is killed; started = a new process. Every
// change happens to the process first and is then recorded in the Daemon
// (state and events), so that a client following the events never learns
// of a running instance before it serves.
//
// Only the Host's own methods drive processes: a client calling
// StartInstance, StopInstance or StandbyInstance over the API changes the
// recorded state alone. Instances created directly on the Daemon have no
// process.
//
// Host is safe for concurrent use.
type Host struct {
	d   *Daemon
	cfg HostConfig

	mu        sync.Mutex
	instances map[string]*hostInstance
	conns     map[net.Conn]struct{} // relayed connections, both sides
	closed    bool
	wg        sync.WaitGroup // accept loops, relays, process waiters
}

// HostConfig says how a Host runs its instances.
type HostConfig struct {
	// Network is the network instances join. NewHost adds it to the
	// Daemon with Subnet and Gateway, which is how clients learn where
	// published ports are reached. Default "default".
	Network string
	// Subnet is the network's CIDR, e.g. "10.213.0.0/24"; informative.
	Subnet string
	// Gateway is the host's address on the network, e.g. "10.213.0.1".
	// A port published without a host address is listened on here (the
	// real daemon forwards it from every host address but loopback).
	// Required.
	Gateway string
	// Command returns the command that runs an instance's service, which
	// must serve TCP on addr (the instance's ip:port) until it is killed.
	// The Host starts, signals and kills it. Required.
	Command func(name, addr string) *exec.Cmd
	// WakeDelay is how long resuming an instance from standby takes, as
	// reading a guest's memory back does; the connection that woke it
	// waits that long. Default 0.
	WakeDelay time.Duration
	// StartTimeout bounds how long a started process may take to accept
	// connections on its address. Default 10s.
	StartTimeout time.Duration
	// Logf, if set, is told of each wake by a connection (like
	// log.Printf).
	Logf func(format string, args ...any)
}

// InstanceSpec describes an instance for Host.Run.
type InstanceSpec struct {
	// Name names the instance (required, unique).
	Name string
	// IP is the instance's address on the network, which the host must
	// own (e.g. a local address in the test's network namespace).
	IP string
	// Port is the guest port the instance's service listens on.
	Port int
	// Labels are the instance's labels.
	Labels map[string]string
	// Publish are the published ports. A TCP mapping with HostPort 0 gets
	// a free port, which the recorded instance then shows; an empty HostIp
	// means the Gateway.
	Publish []*dicerpb.PortMapping
	// StandbyAfter, if not zero, is recorded as standby_after: the
	// instance is then woken from standby by a connection to a published
	// port, and Standby records it as gone idle.
	StandbyAfter time.Duration
	// HealthCheck, if set, is recorded as the instance's health check; the
	// Host probes nothing: health stays STARTING until SetHealth.
	HealthCheck *dicerpb.HealthCheck
}

// hostInstance is one instance's process and relays. mu serialises its
// transitions and the wake; it is taken before Host.mu, never after.
type hostInstance struct {
	mu        sync.Mutex
	spec      InstanceSpec
	state     dicerpb.InstanceState
	proc      *process // nil when stopped
	listeners []net.Listener
	deleted   bool
}

// process is one run of an instance's command.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once the process has been waited for
	killed bool          // guarded by the instance's mu
}

// NewHost returns a Host that runs instances for d, and adds its network to
// d.
func NewHost(d *Daemon, cfg HostConfig) (*Host, error) {
	if cfg.Network == "" {
		cfg.Network = "default"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 10 * time.Second
	}
	if net.ParseIP(cfg.Gateway) == nil {
		return nil, fmt.Errorf("dicertest: host gateway %q is not an IP address", cfg.Gateway)
	}
	if cfg.Command == nil {
		return nil, errors.New("dicertest: host needs a Command")
	}
	d.AddNetwork(&dicerpb.Network{Name: cfg.Network, Subnet: cfg.Subnet, Gateway: cfg.Gateway, Bridge: "dicer-" + cfg.Network})
	return &Host{
		d:         d,
		cfg:       cfg,
		instances: make(map[string]*hostInstance),
		conns:     make(map[net.Conn]struct{}),
	}, nil
}

// Daemon returns the daemon the Host records its instances in.
func (h *Host) Daemon() *Daemon { return h.d }

// Run creates and starts an instance, like `dicer run -d`: it starts the
// process, waits until it accepts connections, opens the published ports,
// then records the instance as running (events CREATED and STARTED). It
// returns the recorded instance.
func (h *Host) Run(spec InstanceSpec) (*dicerpb.Instance, error) {
	if spec.Name == "" || net.ParseIP(spec.IP) == nil || spec.Port < 1 || spec.Port > 65535 {
		return nil, fmt.Errorf("dicertest: instance spec needs a name, an IP and a port: %+v", spec)
	}
	inst := &hostInstance{spec: spec, state: dicerpb.InstanceState_INSTANCE_STATE_STOPPED}
	inst.spec.Publish = clonePorts(spec.Publish)
	inst.mu.Lock()
	defer inst.mu.Unlock()
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, errors.New("dicertest: host is closed")
	case h.instances[spec.Name] != nil || h.d.Instance(spec.Name) != nil:
		h.mu.Unlock()
		return nil, fmt.Errorf("dicertest: instance %q exists", spec.Name)
	}
	h.instances[spec.Name] = inst
	h.mu.Unlock()

	err := h.spawnLocked(inst)
	if err == nil {
		err = h.openPortsLocked(inst)
	}
	if err != nil {
		h.killLocked(inst)
		h.closePortsLocked(inst)
		h.mu.Lock()
		delete(h.instances, spec.Name)
		h.mu.Unlock()
		return nil, err
	}
	rec := &dicerpb.Instance{
		Name:        spec.Name,
		Hostname:    spec.Name,
		NetworkName: h.cfg.Network,
		Ip:          spec.IP,
		Labels:      spec.Labels,
		Ports:       inst.spec.Publish,
		State:       dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		HealthCheck: spec.HealthCheck,
	}
	if spec.StandbyAfter > 0 {
		rec.StandbyAfter = durationpb.New(spec.StandbyAfter)
	}
	inst.state = dicerpb.InstanceState_INSTANCE_STATE_RUNNING
	return h.d.CreateInstance(rec), nil
}

// Stop kills the instance's process, closes its published ports and
// records it as stopped. From standby it throws the frozen guest away.
func (h *Host) Stop(name string) error {
	return h.transition(name, func(inst *hostInstance) error {
		if inst.state == dicerpb.InstanceState_INSTANCE_STATE_STOPPED {
			return errState(inst)
		}
		h.killLocked(inst)
		h.closePortsLocked(inst)
		h.setLocked(inst, dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
		return nil
	})
}

// Start starts a stopped or failed instance with a new process, or
// resumes one on standby (SIGCONT; recorded as STARTED "Resumed instance
// from standby", as `dicer start` does).
func (h *Host) Start(name string) error {
	return h.transition(name, func(inst *hostInstance) error {
		switch inst.state {
		case dicerpb.InstanceState_INSTANCE_STATE_STANDBY:
			return h.resumeLocked(inst, "")
		case dicerpb.InstanceState_INSTANCE_STATE_STOPPED, dicerpb.InstanceState_INSTANCE_STATE_FAILED:
			if err := h.spawnLocked(inst); err != nil {
				return err
			}
			if err := h.openPortsLocked(inst); err != nil {
				h.killLocked(inst)
				return err
			}
			h.setLocked(inst, dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
			return nil
		}
		return errState(inst)
	})
}

// Pause stops the running instance's process with SIGSTOP and records it
// as paused. Its published ports still forward, to a guest that does not
// answer.
func (h *Host) Pause(name string) error {
	return h.transition(name, func(inst *hostInstance) error {
		if inst.state != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
			return errState(inst)
		}
		if err := h.signalLocked(inst, syscall.SIGSTOP); err != nil {
			return err
		}
		h.setLocked(inst, dicerpb.InstanceState_INSTANCE_STATE_PAUSED, nil)
		return nil
	})
}

// Resume continues a paused instance's process with SIGCONT and records it
// as running (event RESUMED).
func (h *Host) Resume(name string) error {
	return h.transition(name, func(inst *hostInstance) error {
		if inst.state != dicerpb.InstanceState_INSTANCE_STATE_PAUSED {
			return errState(inst)
		}
		if err := h.signalLocked(inst, syscall.SIGCONT); err != nil {
			return err
		}
		h.setLocked(inst, dicerpb.InstanceState_INSTANCE_STATE_RUNNING, nil)
		return nil
	})
}

// Standby freezes a running or paused instance (SIGSTOP) and records it as
// on standby. An instance with StandbyAfter is recorded as gone idle (the
// STANDBY event carries idle_seconds) and from then on the Host itself
// listens on its published ports: a connection wakes it. Without
// StandbyAfter it is on standby "by hand": its published ports are closed
// and nothing wakes it but Start.
func (h *Host) Standby(name string) error {
	return h.transition(name, func(inst *hostInstance) error {
		if inst.state != dicerpb.InstanceState_INSTANCE_STATE_RUNNING && inst.state != dicerpb.InstanceState_INSTANCE_STATE_PAUSED {
			return errState(inst)
		}
		if err := h.signalLocked(inst, syscall.SIGSTOP); err != nil {
			return err
		}
		var attrs map[string]string
		if inst.spec.StandbyAfter > 0 {
			attrs = map[string]string{"idle_seconds": strconv.Itoa(int(inst.spec.StandbyAfter / time.Second))}
		} else {
			h.closePortsLocked(inst)
		}
		h.setLocked(inst, dicerpb.InstanceState_INSTANCE_STATE_STANDBY, attrs)
		return nil
	})
}

// Delete kills the instance's process, closes its published ports and
// deletes it from the Daemon (event DELETED), like `dicer rm --force`.
func (h *Host) Delete(name string) error {
	return h.transition(name, func(inst *hostInstance) error {
		h.killLocked(inst)
		h.closePortsLocked(inst)
		inst.deleted = true
		h.mu.Lock()
		delete(h.instances, name)
		h.mu.Unlock()
		h.d.DeleteInstance(name)
		return nil
	})
}

// Pid returns the process ID of the instance's current process, or 0 if it
// has none (stopped, failed, unknown).
func (h *Host) Pid(name string) int {
	inst := h.lookup(name)
	if inst == nil {
		return 0
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.proc == nil {
		return 0
	}
	return inst.proc.cmd.Process.Pid
}

// State returns the state the Host last gave the instance, or UNSPECIFIED
// for an unknown one.
func (h *Host) State(name string) dicerpb.InstanceState {
	inst := h.lookup(name)
	if inst == nil {
		return dicerpb.InstanceState_INSTANCE_STATE_UNSPECIFIED
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	return inst.state
}

// Close kills every instance's process, closes every published port and
// relayed connection, and waits for the Host's goroutines. The Daemon keeps
// its records.
func (h *Host) Close() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	insts := make([]*hostInstance, 0, len(h.instances))
	for _, inst := range h.instances {
		insts = append(insts, inst)
	}
	h.mu.Unlock()
	for _, inst := range insts {
		inst.mu.Lock()
		h.killLocked(inst)
		h.closePortsLocked(inst)
		inst.mu.Unlock()
	}
	h.mu.Lock()
	for c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// ---- internals --------------------------------------------------------------

func (h *Host) lookup(name string) *hostInstance {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.instances[name]
}

// transition runs f with the instance's lock held.
func (h *Host) transition(name string, f func(*hostInstance) error) error {
	inst := h.lookup(name)
	if inst == nil {
		return fmt.Errorf("dicertest: host has no instance %q", name)
	}
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.deleted {
		return fmt.Errorf("dicertest: host has no instance %q", name)
	}
	return f(inst)
}

func errState(inst *hostInstance) error {
	return fmt.Errorf("dicertest: instance %q is %s", inst.spec.Name, stateWord(inst.state))
}

// setLocked records a new state in the Daemon.
func (h *Host) setLocked(inst *hostInstance, s dicerpb.InstanceState, attrs map[string]string) {
	inst.state = s
	h.d.SetState(inst.spec.Name, s, attrs)
}

// resumeLocked continues a frozen instance that is on standby and records
// STARTED; wokenBy is the published host port whose connection woke it,
// or "".
func (h *Host) resumeLocked(inst *hostInstance, wokenBy string) error {
	if err := h.signalLocked(inst, syscall.SIGCONT); err != nil {
		return err
	}
	if err := h.openPortsLocked(inst); err != nil { // closed if it was on standby by hand
		return err
	}
	attrs := map[string]string{"ip": inst.spec.IP}
	if wokenBy != "" {
		attrs["woken_by_port"] = wokenBy
	}
	h.setLocked(inst, dicerpb.InstanceState_INSTANCE_STATE_RUNNING, attrs)
	return nil
}

func (h *Host) signalLocked(inst *hostInstance, sig syscall.Signal) error {
	if inst.proc == nil {
		return fmt.Errorf("dicertest: instance %q has no process", inst.spec.Name)
	}
	if err := inst.proc.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("dicertest: instance %q: %v: %w", inst.spec.Name, sig, err)
	}
	if sig == syscall.SIGSTOP {
		// A signal is delivered asynchronously: wait until every thread
		// is stopped, so that a frozen instance answers nothing from the
		// moment its state says so, as a daemon's does.
		return waitStopped(inst.proc.cmd.Process.Pid)
	}
	return nil
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc), for at most 5 s.
func waitStopped(pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, task := range tasks {
			b, err := os.ReadFile(task)
			// pid (comm) S ...: the state follows the last ')'.
			i := bytes.LastIndexByte(b, ')')
			if err == nil && (i < 0 || i+2 >= len(b) || b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dicertest: process %d not stopped 5s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond) // poll /proc: no notification exists for this
	}
}

// spawnLocked starts the instance's process and waits until it accepts
// connections on its address.
func (h *Host) spawnLocked(inst *hostInstance) error {
	addr := net.JoinHostPort(inst.spec.IP, strconv.Itoa(inst.spec.Port))
	cmd := h.cfg.Command(inst.spec.Name, addr)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dicertest: instance %q: %w", inst.spec.Name, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	inst.proc = p
	h.wg.Add(1)
	go h.waitProcess(inst, p)

	deadline := time.Now().Add(h.cfg.StartTimeout)
	for {
		c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-p.exited:
			inst.proc = nil
			return fmt.Errorf("dicertest: instance %q: process exited before serving on %s: %v", inst.spec.Name, addr, cmd.ProcessState)
		default:
		}
		if time.Now().After(deadline) {
			h.killLocked(inst)
			return fmt.Errorf("dicertest: instance %q: not serving on %s within %s: %w", inst.spec.Name, addr, h.cfg.StartTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitProcess reaps p. A process that ends on its own while it is the
// instance's current one ends the instance as a guest would: exit code 0
// makes it stopped (event EXITED), anything else failed (event DIED), with
// the attribute exit_code.
func (h *Host) waitProcess(inst *hostInstance, p *process) {
	defer h.wg.Done()
	_ = p.cmd.Wait()
	close(p.exited)
	inst.mu.Lock()
	defer inst.mu.Unlock()
	if inst.proc != p || p.killed || inst.deleted {
		return
	}
	inst.proc = nil
	h.closePortsLocked(inst)
	code := p.cmd.ProcessState.ExitCode() // -1 when killed by a signal
	end := dicerpb.InstanceState_INSTANCE_STATE_FAILED
	if code == 0 {
		end = dicerpb.InstanceState_INSTANCE_STATE_STOPPED
	}
	h.setLocked(inst, end, map[string]string{"exit_code": strconv.Itoa(code)})
}

// killLocked kills the instance's process, if any, and waits until it has
// been reaped.
func (h *Host) killLocked(inst *hostInstance) {
	p := inst.proc
	if p == nil {
		return
	}
	p.killed = true
	_ = p.cmd.Process.Kill() // SIGKILL also ends a stopped process
	<-p.exited
	inst.proc = nil
}

// openPortsLocked listens on each published TCP port that is not open
// yet. A HostPort of 0 is given a free port, recorded in the spec.
func (h *Host) openPortsLocked(inst *hostInstance) error {
	if inst.listeners != nil {
		return nil
	}
	var lns []net.Listener
	for _, pm := range inst.spec.Publish {
		if pm.GetProtocol() == dicerpb.Protocol_PROTOCOL_UDP {
			continue
		}
		hostIP := pm.GetHostIp()
		if hostIP == "" {
			hostIP = h.cfg.Gateway
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(hostIP, strconv.Itoa(int(pm.GetHostPort()))))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return fmt.Errorf("dicertest: instance %q: publishing port %d: %w", inst.spec.Name, pm.GetGuestPort(), err)
		}
		pm.HostPort = uint32(ln.Addr().(*net.TCPAddr).Port)
		if pm.Protocol == dicerpb.Protocol_PROTOCOL_UNSPECIFIED {
			pm.Protocol = dicerpb.Protocol_PROTOCOL_TCP
		}
		lns = append(lns, ln)
		h.wg.Add(1)
		go h.accept(inst, ln, pm.GetHostPort(), pm.GetGuestPort())
	}
	inst.listeners = lns
	if lns == nil {
		inst.listeners = []net.Listener{}
	}
	return nil
}

func (h *Host) closePortsLocked(inst *hostInstance) {
	for _, ln := range inst.listeners {
		_ = ln.Close()
	}
	inst.listeners = nil
}

// accept serves one published port until its listener is closed.
func (h *Host) accept(inst *hostInstance, ln net.Listener, hostPort, guestPort uint32) {
	defer h.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		h.wg.Add(1)
		go h.forward(inst, c, hostPort, guestPort)
	}
}

// forward relays one connection to a published port to the guest, waking
// the instance first if it is on standby and wakeable. One wake happens at
// a time; connections that arrive meanwhile wait for it and are relayed.
func (h *Host) forward(inst *hostInstance, c net.Conn, hostPort, guestPort uint32) {
	defer h.wg.Done()
	inst.mu.Lock()
	ok := true
	switch inst.state {
	case dicerpb.InstanceState_INSTANCE_STATE_RUNNING, dicerpb.InstanceState_INSTANCE_STATE_PAUSED:
	case dicerpb.InstanceState_INSTANCE_STATE_STANDBY:
		ok = inst.spec.StandbyAfter > 0 && !inst.deleted
		if ok {
			time.Sleep(h.cfg.WakeDelay)
			ok = h.resumeLocked(inst, strconv.Itoa(int(hostPort))) == nil
			if ok && h.cfg.Logf != nil {
				h.cfg.Logf("instance %s: woken from standby by a connection to port %d", inst.spec.Name, hostPort)
			}
		}
	default:
		ok = false
	}
	target := net.JoinHostPort(inst.spec.IP, strconv.Itoa(int(guestPort)))
	inst.mu.Unlock()
	if !ok {
		_ = c.Close() // as the daemon does when resuming fails
		return
	}
	g, err := net.DialTimeout("tcp", target, 10*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	if !h.track(c, g) {
		return
	}
	defer h.untrack(c, g)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(g, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, g); done <- struct{}{} }()
	<-done
	_ = c.Close()
	_ = g.Close()
	<-done
}

// track registers a relayed pair so that Close can cut it; it closes both
// and reports false if the Host is closed.
func (h *Host) track(a, b net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = a.Close()
		_ = b.Close()
		return false
	}
	h.conns[a] = struct{}{}
	h.conns[b] = struct{}{}
	return true
}

func (h *Host) untrack(a, b net.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.conns, a)
	delete(h.conns, b)
}

func clonePorts(in []*dicerpb.PortMapping) []*dicerpb.PortMapping {
	out := make([]*dicerpb.PortMapping, len(in))
	for i, pm := range in {
		out[i] = &dicerpb.PortMapping{HostIp: pm.GetHostIp(), HostPort: pm.GetHostPort(), GuestPort: pm.GetGuestPort(), Protocol: pm.GetProtocol()}
	}
	return out
}

// HelloBody is what an instance's service answers: "hello from <name>\n".
func HelloBody(name string) string { return "hello from " + name + "\n" }

// maxSlowHello bounds the d of a request for /slow?d=<duration>.
const maxSlowHello = 10 * time.Second

// ServeHelloProcess is the body of an instance process: it serves HTTP on
// addr, any address the process may bind, answering every request with
// HelloBody(name) (a request for /slow?d=<duration> after that long, at
// most 10 s), until ctx is done. Test binaries run it in a mode of
// their own to be a Host's Command.
func ServeHelloProcess(ctx context.Context, addr, name string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dicertest: %w", err)
	}
	body := HelloBody(name)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if d, err := time.ParseDuration(r.URL.Query().Get("d")); err == nil && r.URL.Path == "/slow" {
				select { // a slow answer, for the benchmarks (bench/queue.sh)
				case <-time.After(min(d, maxSlowHello)):
				case <-r.Context().Done():
				}
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(w, body)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
