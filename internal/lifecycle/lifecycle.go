// Package lifecycle carries what happens to an instance (it joins or
// leaves a rotation, is woken, put on standby, restarted by a heal, or a
// request finds a queue full) from where it happens, in the connection's
// engines, to Caddy's events app, which the Caddy side plugs in as a Sink
// (R13e, docs/events.md). Those engines run under their own locks and on
// the daemon's follow loop: Emit never blocks them. Events wait in a
// bounded buffer, one per connection, and one goroutine hands them to the
// Sink in the order they were emitted; when the buffer is full an event is
// dropped and counted. No Caddy import.
package lifecycle

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Event names, as Caddy's events app and its handlers see them
// (`events { on dicer_instance_joined ... }`). docs/events.md lists the
// data of each.
const (
	// Joined: the instance joins the rotation of a route (R6); data: why.
	Joined = "dicer_instance_joined"
	// Left: the instance leaves every rotation (R6, R6b); data: why.
	Left = "dicer_instance_left"
	// Waking: Caddy starts waking the instance (R5, R5j, R5k, R5n); data:
	// cause (request, load, dependency, client_hello).
	Waking = "dicer_instance_waking"
	// Standby: Caddy puts the idle instance on standby (R5c); data: why,
	// action (stop, pause), idle_seconds.
	Standby = "dicer_instance_standby"
	// HealRestart: a heal restarted the instance, or tried to (R1e);
	// data: result (restarted, denied, error).
	HealRestart = "dicer_instance_heal_restart"
	// Removed: the instance was removed while on standby; nothing will
	// wake it (R5o); data: removed_at.
	Removed = "dicer_instance_removed"
	// QueueOverflow: a request found a route's queue full; data: route,
	// host, queued, max_queued.
	QueueOverflow = "dicer_queue_overflow"
	// RolledBack: a rollout's step failed, or an operator aborted it
	// (R4f); data: route, old, new, step, share, why, and the figures.
	RolledBack = "dicer_rollout_rolled_back"
)

// Names are every event name, in the order docs/events.md lists them.
var Names = []string{Joined, Left, Waking, Standby, HealRestart, Removed, QueueOverflow, RolledBack}

// Instance is who an event is about: the identity every event's data
// carries (id, name, hosts, image). Zero for an event about a route
// (QueueOverflow).
type Instance struct {
	ID, Name string
	// Hosts are the hosts it claims (caddy.host), if any.
	Hosts []string
	// Image is what it runs (Docker: the image's ID), "" unknown.
	Image string
}

// Sink is where events go: Caddy's events app, through the dicer app. It
// is called from the Bus's own goroutine, one event at a time, in order;
// it may take its time (Caddy's handlers run in it).
type Sink interface {
	// Listens reports whether anything would hear an event of this
	// name (caddyevents.App.ShouldEmit): when not, its data is not built.
	Listens(name string) bool
	// Emit hands the event on.
	Emit(name string, data map[string]any)
}

// BufferSize bounds the events waiting for the Sink, per connection.
const BufferSize = 1024

// Bus is one connection's queue of events on their way to its Sink.
type Bus struct {
	kind, daemon string
	ch           chan event
	sink         atomic.Pointer[sinkBox]
	// Resolve, if set, fills in the identity of an event emitted with an
	// ID alone, from the Bus's goroutine (never under the emitter's lock).
	resolve func(id string) (Instance, bool)
	dropped func() // counts an event dropped on a full buffer
	wg      sync.WaitGroup
}

type sinkBox struct{ s Sink }

type event struct {
	name  string
	at    time.Time
	inst  Instance
	whole bool // inst is complete: not to resolve
	data  map[string]any
}

// Options are a Bus's settings.
type Options struct {
	// Kind and Daemon name the connection (docker, unix:///var/run/docker.sock):
	// every event's data has them as daemon_kind and daemon.
	Kind, Daemon string
	// Resolve, if set, gives the identity of an instance by its ID, for
	// events emitted with an ID alone (EmitID).
	Resolve func(id string) (Instance, bool)
	// Dropped, if set, counts each event dropped because the buffer was
	// full (caddy_dicer_events_dropped_total).
	Dropped func()
}

// New starts a Bus; it stops when ctx ends, after handing on what its
// buffer held (Wait waits for that).
func New(ctx context.Context, opts Options) *Bus {
	b := &Bus{kind: opts.Kind, daemon: opts.Daemon, ch: make(chan event, BufferSize),
		resolve: opts.Resolve, dropped: opts.Dropped}
	b.wg.Add(1)
	go b.run(ctx)
	return b
}

// SetSink makes s the Sink of the events emitted from now on (nil: none;
// they are not even buffered). The Caddy side sets it at every config
// load.
func (b *Bus) SetSink(s Sink) {
	if b == nil {
		return
	}
	if s == nil {
		b.sink.Store(nil)
		return
	}
	b.sink.Store(&sinkBox{s})
}

// listens reports whether an event called name would be heard.
func (b *Bus) listens(name string) bool {
	if b == nil {
		return false
	}
	box := b.sink.Load()
	return box != nil && box.s.Listens(name)
}

// Emit queues the event name about inst, with data (which it keeps: the
// caller must not change it after), without blocking: on a full buffer
// the event is dropped and counted. A nil Bus drops everything.
func (b *Bus) Emit(name string, inst Instance, data map[string]any) {
	if !b.listens(name) {
		return
	}
	b.push(event{name: name, at: time.Now(), inst: inst, whole: true, data: data})
}

// EmitID is Emit for an instance known by its ID alone: the Bus fills in
// its name, hosts and image when it hands the event on. name is the name
// the emitter knows, if any (kept when the instance is gone by then).
func (b *Bus) EmitID(event string, id, name string, data map[string]any) {
	if !b.listens(event) {
		return
	}
	b.push(eventOf(event, id, name, data))
}

func eventOf(name, id, instName string, data map[string]any) event {
	return event{name: name, at: time.Now(), inst: Instance{ID: id, Name: instName}, data: data}
}

// Listens reports whether an event called name would be heard now, so
// that a caller can skip building its data.
func (b *Bus) Listens(name string) bool { return b.listens(name) }

func (b *Bus) push(e event) {
	select {
	case b.ch <- e:
	default:
		if b.dropped != nil {
			b.dropped()
		}
	}
}

// Wait waits until the Bus has stopped (its ctx ended).
func (b *Bus) Wait() {
	if b != nil {
		b.wg.Wait()
	}
}

func (b *Bus) run(ctx context.Context) {
	defer b.wg.Done()
	for {
		select {
		case e := <-b.ch:
			b.deliver(e)
		case <-ctx.Done():
			for {
				select {
				case e := <-b.ch:
					b.deliver(e)
				default:
					return
				}
			}
		}
	}
}

func (b *Bus) deliver(e event) {
	box := b.sink.Load()
	if box == nil {
		return
	}
	if !e.whole && b.resolve != nil {
		if inst, ok := b.resolve(e.inst.ID); ok {
			if inst.Name == "" {
				inst.Name = e.inst.Name
			}
			e.inst = inst
		}
	}
	box.s.Emit(e.name, b.data(e))
}

// data is e's data as the Sink gets it: the identity, then the event's own.
func (b *Bus) data(e event) map[string]any {
	d := make(map[string]any, len(e.data)+8)
	for k, v := range e.data {
		d[k] = v
	}
	d["daemon_kind"] = b.kind
	d["daemon"] = b.daemon
	d["time"] = e.at.UTC().Format(time.RFC3339Nano)
	if e.inst.ID != "" || e.inst.Name != "" {
		d["id"] = e.inst.ID
		d["name"] = e.inst.Name
		d["image"] = e.inst.Image
		hosts := e.inst.Hosts
		if hosts == nil {
			hosts = []string{}
		}
		d["hosts"] = hosts
		d["host"] = ""
		if len(hosts) > 0 {
			d["host"] = hosts[0]
		}
	}
	return d
}
