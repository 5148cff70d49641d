package dicertest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// What the tests of the plugin and of its Engine suite (e2e/engine) do with a
// test daemon, each cleaned up when its test ends.

// OnSocket is a test daemon serving on a unix socket, and the socket's
// path; both go when t ends.
func OnSocket(t testing.TB) (*Daemon, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dcr") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := New()
	t.Cleanup(d.Close)
	sock := filepath.Join(dir, "d.sock")
	if err := d.ServeUnix(sock); err != nil {
		t.Fatal(err)
	}
	return d, sock
}

// HelloPort serves hello on ip (any free port) as ListenHello, until t
// ends, and returns the port.
func HelloPort(t testing.TB, ip, name string) int {
	t.Helper()
	addr, stop, err := ListenHello(ip+":0", name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	return port
}

// HelloInstance starts a hello server on ip (HelloPort) and creates a
// running instance there whose caddy.port label names that port, with
// labels besides.
func (d *Daemon) HelloInstance(t testing.TB, name, ip string, labels map[string]string) *dicerpb.Instance {
	t.Helper()
	l := map[string]string{"caddy.port": strconv.Itoa(HelloPort(t, ip, name))}
	for k, v := range labels {
		l[k] = v
	}
	return d.CreateInstance(&dicerpb.Instance{
		Name: name, Ip: ip, NetworkName: "default", Labels: l,
		State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
	})
}

// AsleepInstance creates an instance on standby (standby_after set),
// publishing its guest port 8080 on every host address; the daemon's
// "wake" is a hello server on wakeIP answering as the instance, so that a
// request that reaches it shows the instance woken.
func (d *Daemon) AsleepInstance(t testing.TB, name, wakeIP string, labels map[string]string) {
	t.Helper()
	hostPort := HelloPort(t, wakeIP, name)
	l := map[string]string{"caddy.port": "8080"}
	for k, v := range labels {
		l[k] = v
	}
	d.CreateInstance(&dicerpb.Instance{
		Name: name, Ip: "10.200.0.1", NetworkName: "default", Labels: l,
		State:        dicerpb.InstanceState_INSTANCE_STATE_STANDBY,
		StandbyAfter: durationpb.New(5 * time.Minute),
		Ports:        []*dicerpb.PortMapping{{HostPort: uint32(hostPort), GuestPort: 8080, Protocol: dicerpb.Protocol_PROTOCOL_TCP}},
	})
}
