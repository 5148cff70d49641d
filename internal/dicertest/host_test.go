//go:build unix

package dicertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// The Host tests run instances as this test binary in the helper mode
// below, on 127.0.0.0/8 addresses with the gateway on 127.0.0.1.

const (
	helperNameEnv = "DICERTEST_HOST_HELPER_NAME"
	helperAddrEnv = "DICERTEST_HOST_HELPER_ADDR"
)

// TestHostHelperProcess is not a test: it is the instance process the other
// Host tests start (the helper-process pattern), and returns at once in a
// normal run.
func TestHostHelperProcess(t *testing.T) {
	name, addr := os.Getenv(helperNameEnv), os.Getenv(helperAddrEnv)
	if name == "" {
		return
	}
	os.Exit(helperMain(name, addr))
}

func helperMain(name, addr string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := ServeHelloProcess(ctx, addr, name); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	return 0
}

func helperCommand(name, addr string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostHelperProcess$")
	cmd.Env = append(os.Environ(), helperNameEnv+"="+name, helperAddrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	return cmd
}

func newTestHost(t *testing.T, wake time.Duration) *Host {
	t.Helper()
	d := New()
	t.Cleanup(d.Close)
	h, err := NewHost(d, HostConfig{Subnet: "127.0.0.0/8", Gateway: "127.0.0.1", Command: helperCommand, WakeDelay: wake})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// fetch GETs http://addr/ with a short timeout.
func fetch(addr string, timeout time.Duration) (string, error) {
	c := http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	res, err := c.Get("http://" + addr + "/")
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return string(b), err
}

func mustServe(t *testing.T, addr, name string) {
	t.Helper()
	body, err := fetch(addr, 5*time.Second)
	if err != nil || body != HelloBody(name) {
		t.Fatalf("GET %s: %q, %v; want %q", addr, body, err, HelloBody(name))
	}
}

func mustNotServe(t *testing.T, addr string) {
	t.Helper()
	if body, err := fetch(addr, 300*time.Millisecond); err == nil {
		t.Fatalf("GET %s answered %q; want no answer", addr, body)
	}
}

func lastEvent(t *testing.T, d *Daemon, name string) *dicerpb.Event {
	t.Helper()
	evs := d.Events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].GetName() == name {
			return evs[i]
		}
	}
	t.Fatalf("no event for %s", name)
	return nil
}

func TestHostRunServesAndRecords(t *testing.T) {
	h := newTestHost(t, 0)
	port := testkit.FreePort(t, "127.0.0.1")
	inst, err := h.Run(InstanceSpec{
		Name: "web-1", IP: "127.0.0.1", Port: port, Labels: map[string]string{"app": "web"},
		Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if inst.GetState() != dicerpb.InstanceState_INSTANCE_STATE_RUNNING || inst.GetIp() != "127.0.0.1" || inst.GetNetworkName() != "default" {
		t.Errorf("recorded %v", inst)
	}
	hostPort := inst.GetPorts()[0].GetHostPort()
	if hostPort == 0 || inst.GetPorts()[0].GetProtocol() != dicerpb.Protocol_PROTOCOL_TCP {
		t.Fatalf("published port not assigned: %v", inst.GetPorts())
	}
	mustServe(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "web-1")
	mustServe(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(int(hostPort))), "web-1")
	if ev := lastEvent(t, h.Daemon(), "web-1"); ev.GetAction() != dicerpb.EventAction_EVENT_ACTION_STARTED {
		t.Errorf("last event %v, want STARTED", ev)
	}
	if n := h.Daemon().Instance("web-1"); n.GetStandbyAfter() != nil {
		t.Errorf("standby_after set without StandbyAfter")
	}
	if _, err := h.Run(InstanceSpec{Name: "web-1", IP: "127.0.0.1", Port: port}); err == nil {
		t.Error("a second web-1 was run")
	}
}

func TestHostLifecycleDrivesTheProcess(t *testing.T) {
	h := newTestHost(t, 0)
	port := testkit.FreePort(t, "127.0.0.2")
	addr := net.JoinHostPort("127.0.0.2", strconv.Itoa(port))
	if _, err := h.Run(InstanceSpec{Name: "w", IP: "127.0.0.2", Port: port}); err != nil {
		t.Fatal(err)
	}
	pid := h.Pid("w")
	steps := []struct {
		do     func(string) error
		state  dicerpb.InstanceState
		action dicerpb.EventAction
		serves bool
	}{
		{h.Pause, dicerpb.InstanceState_INSTANCE_STATE_PAUSED, dicerpb.EventAction_EVENT_ACTION_PAUSED, false},
		{h.Resume, dicerpb.InstanceState_INSTANCE_STATE_RUNNING, dicerpb.EventAction_EVENT_ACTION_RESUMED, true},
		{h.Stop, dicerpb.InstanceState_INSTANCE_STATE_STOPPED, dicerpb.EventAction_EVENT_ACTION_STOPPED, false},
		{h.Start, dicerpb.InstanceState_INSTANCE_STATE_RUNNING, dicerpb.EventAction_EVENT_ACTION_STARTED, true},
		{h.Standby, dicerpb.InstanceState_INSTANCE_STATE_STANDBY, dicerpb.EventAction_EVENT_ACTION_STANDBY, false},
		{h.Start, dicerpb.InstanceState_INSTANCE_STATE_RUNNING, dicerpb.EventAction_EVENT_ACTION_STARTED, true},
	}
	for i, s := range steps {
		if err := s.do("w"); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := h.Daemon().Instance("w").GetState(); got != s.state || h.State("w") != s.state {
			t.Fatalf("step %d: recorded %v, host %v, want %v", i, got, h.State("w"), s.state)
		}
		if ev := lastEvent(t, h.Daemon(), "w"); ev.GetAction() != s.action {
			t.Fatalf("step %d: event %v, want %v", i, ev.GetAction(), s.action)
		}
		if s.serves {
			mustServe(t, addr, "w")
		} else {
			mustNotServe(t, addr)
		}
	}
	if h.Pid("w") == pid {
		t.Error("Start after Stop kept the old process")
	}
	if err := h.Resume("w"); err == nil {
		t.Error("Resume of a running instance succeeded")
	}
	if err := h.Delete("w"); err != nil {
		t.Fatal(err)
	}
	if h.Daemon().Instance("w") != nil || h.Pid("w") != 0 {
		t.Error("deleted instance still recorded or running")
	}
	mustNotServe(t, addr)
	if err := h.Stop("w"); err == nil {
		t.Error("Stop of a deleted instance succeeded")
	}
}

func TestHostStandbyWokenByConnectionOnce(t *testing.T) {
	const wake = 200 * time.Millisecond
	h := newTestHost(t, wake)
	port := testkit.FreePort(t, "127.0.0.3")
	inst, err := h.Run(InstanceSpec{
		Name: "sleepy", IP: "127.0.0.3", Port: port, StandbyAfter: 5 * time.Minute,
		Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if inst.GetStandbyAfter().AsDuration() != 5*time.Minute {
		t.Errorf("standby_after %v", inst.GetStandbyAfter())
	}
	if err := h.Standby("sleepy"); err != nil {
		t.Fatal(err)
	}
	if ev := lastEvent(t, h.Daemon(), "sleepy"); ev.GetAttributes()["idle_seconds"] != "300" {
		t.Errorf("STANDBY event %v lacks idle_seconds", ev)
	}
	hostPort := strconv.Itoa(int(inst.GetPorts()[0].GetHostPort()))
	published := net.JoinHostPort("127.0.0.1", hostPort)

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := fetch(published, 10*time.Second)
			if err == nil && body != HelloBody("sleepy") {
				err = fmt.Errorf("body %q", body)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if took := time.Since(start); took < wake {
		t.Errorf("woken in %s, less than the wake delay", took)
	}
	if h.State("sleepy") != dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		t.Fatalf("state %v after the wake", h.State("sleepy"))
	}
	var woken []*dicerpb.Event
	for _, ev := range h.Daemon().Events() {
		if ev.GetName() == "sleepy" && ev.GetAttributes()["woken_by_port"] != "" {
			woken = append(woken, ev)
		}
	}
	if len(woken) != 1 {
		t.Fatalf("%d woken events, want 1", len(woken))
	}
	ev := woken[0]
	wantMsg := "Resumed instance from standby, woken by a connection to port " + hostPort
	if ev.GetAction() != dicerpb.EventAction_EVENT_ACTION_STARTED || ev.GetAttributes()["woken_by_port"] != hostPort || ev.GetMessage() != wantMsg {
		t.Errorf("wake event %v, want STARTED %q", ev, wantMsg)
	}
}

func TestHostStandbyByHandIsNotWoken(t *testing.T) {
	h := newTestHost(t, 0)
	port := testkit.FreePort(t, "127.0.0.4")
	inst, err := h.Run(InstanceSpec{
		Name: "manual", IP: "127.0.0.4", Port: port,
		Publish: []*dicerpb.PortMapping{{GuestPort: uint32(port)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Standby("manual"); err != nil {
		t.Fatal(err)
	}
	published := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(inst.GetPorts()[0].GetHostPort())))
	mustNotServe(t, published)
	if h.State("manual") != dicerpb.InstanceState_INSTANCE_STATE_STANDBY {
		t.Fatalf("state %v, want standby", h.State("manual"))
	}
	if err := h.Start("manual"); err != nil {
		t.Fatal(err)
	}
	if ev := lastEvent(t, h.Daemon(), "manual"); ev.GetMessage() != "Resumed instance from standby" {
		t.Errorf("start from standby: %v", ev)
	}
	mustServe(t, published, "manual")
}

func TestHostProcessDeathFailsTheInstance(t *testing.T) {
	h := newTestHost(t, 0)
	port := testkit.FreePort(t, "127.0.0.5")
	if _, err := h.Run(InstanceSpec{Name: "fragile", IP: "127.0.0.5", Port: port}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sig    syscall.Signal
		state  dicerpb.InstanceState
		action dicerpb.EventAction
		code   string
	}{
		// The helper exits 0 on SIGTERM: a clean end.
		{syscall.SIGTERM, dicerpb.InstanceState_INSTANCE_STATE_STOPPED, dicerpb.EventAction_EVENT_ACTION_EXITED, "0"},
		{syscall.SIGKILL, dicerpb.InstanceState_INSTANCE_STATE_FAILED, dicerpb.EventAction_EVENT_ACTION_DIED, "-1"},
	} {
		if err := syscall.Kill(h.Pid("fragile"), c.sig); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Second)
		for h.Daemon().Instance("fragile").GetState() != c.state {
			if time.Now().After(deadline) {
				t.Fatalf("%v: state %v, want %v", c.sig, h.Daemon().Instance("fragile").GetState(), c.state)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ev := lastEvent(t, h.Daemon(), "fragile"); ev.GetAction() != c.action || ev.GetAttributes()["exit_code"] != c.code {
			t.Errorf("%v: event %v, want %v with exit_code %s", c.sig, ev, c.action, c.code)
		}
		if err := h.Start("fragile"); err != nil {
			t.Fatal(err)
		}
		mustServe(t, net.JoinHostPort("127.0.0.5", strconv.Itoa(port)), "fragile")
	}
}

func TestHostCloseKillsEverything(t *testing.T) {
	d := New()
	defer d.Close()
	h, err := NewHost(d, HostConfig{Gateway: "127.0.0.1", Command: helperCommand})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for i := range 3 {
		ip := "127.0.0." + strconv.Itoa(6+i)
		if _, err := h.Run(InstanceSpec{Name: "c" + strconv.Itoa(i), IP: ip, Port: testkit.FreePort(t, ip)}); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, h.Pid("c"+strconv.Itoa(i)))
	}
	if err := h.Pause("c1"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d outlived Close", pid)
		}
	}
	if _, err := h.Run(InstanceSpec{Name: "late", IP: "127.0.0.9", Port: 1}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Run after Close: %v", err)
	}
}
