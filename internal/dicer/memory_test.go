package dicer

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// R5l on Dicer: what the catalog keeps per wakeable instance as this
// adapter translates it, the twin of catalog's
// TestSleepers_memory_per_instance: 10,000 instances on standby (put there
// by the daemon: no Caddy timer), each with its own caddy.host,
// standby_after and a published port, as the daemon lists them. The heap
// after two collections, the translated instances included, the daemon's
// messages not (the adapter drops them once translated; strings the
// translation shares with them stay, and are counted). Logged; the goal
// is at most 2 KB, asserted loosely.
//
//	go test -count=1 -run TestSleepers_dicer_memory_per_instance -v ./internal/dicer/
func TestSleepers_dicer_memory_per_instance(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement: 10,000 instances and forced collections")
	}
	const n = 10000
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	msgs := make([]*dicerpb.Instance, n)
	for i := range msgs {
		name := fmt.Sprintf("preview-%05d", i)
		msgs[i] = &dicerpb.Instance{
			Id: fmt.Sprintf("%032x", i*7919+1), Name: name, Hostname: name, NetworkName: "default",
			Ip:           fmt.Sprintf("10.213.%d.%d", i>>8, i&0xff),
			Labels:       map[string]string{"caddy.host": name + ".preview.example.com", "app": name},
			Ports:        []*dicerpb.PortMapping{{HostPort: uint32(20000 + i), GuestPort: 8080, Protocol: dicerpb.Protocol_PROTOCOL_TCP}},
			State:        dicerpb.InstanceState_INSTANCE_STATE_STANDBY,
			StandbyAfter: durationpb.New(10 * time.Minute),
		}
	}
	gateways := map[string]string{"default": "10.213.0.1"}
	insts := make([]catalog.Instance, n)
	for i, m := range msgs {
		insts[i] = translate(m, gateways)
	}
	if !insts[0].WakeOnConnect || insts[0].State != catalog.StateStandby || len(insts[0].Ports) != 1 {
		t.Fatalf("translated: %+v, want on standby, wakeable, one published port", insts[0])
	}
	c := catalog.New(catalog.Options{})
	c.Replace(insts)
	insts = nil // the catalog's own copies remain: what it keeps
	withMessages := heap()
	runtime.KeepAlive(msgs)
	msgs = nil // dropped, as the adapter does once they are translated
	after := heap()
	per := (float64(after) - float64(before)) / n
	t.Logf("catalog heap per wakeable Dicer instance, %d instances: %.0f B (goal: 2 KB); the daemon's messages as received, for scale: %.0f B each",
		n, per, (float64(withMessages)-float64(after))/n)
	if per > 8*1024 {
		t.Errorf("%.0f B per instance", per)
	}
	runtime.KeepAlive(c)
}
