package swarm

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// A node that crashes or drops off the network is marked down by Swarm
// only after its heartbeats have been missed for several seconds (12 s
// measured here), and its tasks' connections time out meanwhile. The node
// watch does not wait for that (R11t): every NodeProbe it opens a TCP
// connection to one or two tasks of each other node that has routable
// tasks (at their address and caddy.port), and a node none of whose
// probed tasks answers within NodeProbeTimeout (not even with a refusal)
// is lost: its tasks leave the rotations, as unhealthy, until one of them
// answers again. The manager Caddy follows is not probed: its own tasks'
// containers are followed by their events.

// Node watch bounds (see Config.NodeProbe).
const (
	// DefaultNodeProbe is how often each other node is probed.
	DefaultNodeProbe = 250 * time.Millisecond
	// NodeProbeTimeout is how long a probe waits for an answer.
	NodeProbeTimeout = 500 * time.Millisecond
	// nodeProbeTargets is how many of a node's tasks one probe tries.
	nodeProbeTargets = 2
)

// dialFunc opens a connection (net.Dialer.DialContext).
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// probeTarget is where a task is probed.
type probeTarget struct {
	node, addr string
}

// nodeWatch is the node watch of one session: the session sets the
// targets as it translates tasks and reads which nodes are lost; the
// probing goroutine sets the verdicts and says which changed.
type nodeWatch struct {
	interval time.Duration
	dial     dialFunc

	mu      sync.Mutex
	local   string                            // this node's ID: not probed
	targets map[string]map[string]probeTarget // service ID -> task ID -> target
	lost    map[string]bool                   // node ID -> lost
	changed map[string]bool                   // nodes whose verdict changed, not yet taken
	next    map[string]int                    // node ID -> rotation of its targets
	notify  chan struct{}                     // a verdict changed
}

func newNodeWatch(interval time.Duration, dial dialFunc) *nodeWatch {
	return &nodeWatch{
		interval: interval, dial: dial,
		targets: map[string]map[string]probeTarget{}, lost: map[string]bool{},
		changed: map[string]bool{}, next: map[string]int{}, notify: make(chan struct{}, 1),
	}
}

// setLocal sets this node's ID, whose tasks are not probed.
func (w *nodeWatch) setLocal(id string) {
	w.mu.Lock()
	w.local = id
	w.mu.Unlock()
}

// setService replaces a service's probe targets (none: it is gone).
func (w *nodeWatch) setService(id string, targets map[string]probeTarget) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(targets) == 0 {
		delete(w.targets, id)
		return
	}
	w.targets[id] = targets
}

// isLost says whether node is lost.
func (w *nodeWatch) isLost(node string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost[node]
}

// takeChanged returns the nodes whose verdict changed since the last call.
func (w *nodeWatch) takeChanged() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.changed))
	for n := range w.changed {
		out = append(out, n)
	}
	clear(w.changed)
	return out
}

// round picks, for each node other than this one, up to nodeProbeTargets
// of its targets (rotating through them), and forgets the verdicts of
// nodes with none left.
func (w *nodeWatch) round() map[string][]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	all := map[string][]string{}
	for _, ts := range w.targets {
		for _, t := range ts {
			if t.node != w.local {
				all[t.node] = append(all[t.node], t.addr)
			}
		}
	}
	for n := range w.lost {
		if _, ok := all[n]; !ok {
			delete(w.lost, n)
		}
	}
	pick := make(map[string][]string, len(all))
	for n, addrs := range all {
		slices.Sort(addrs)
		addrs = slices.Compact(addrs)
		k := min(nodeProbeTargets, len(addrs))
		start := w.next[n] % len(addrs)
		w.next[n] = start + k
		for i := range k {
			pick[n] = append(pick[n], addrs[(start+i)%len(addrs)])
		}
	}
	return pick
}

// verdict records whether node answered, and says so on notify if that
// changed its verdict.
func (w *nodeWatch) verdict(node string, answered bool, log *zap.Logger) {
	w.mu.Lock()
	was := w.lost[node]
	if was == !answered {
		w.mu.Unlock()
		return
	}
	if answered {
		delete(w.lost, node)
	} else {
		w.lost[node] = true
	}
	w.changed[node] = true
	w.mu.Unlock()
	if answered {
		log.Info("swarm node answers again: its tasks rejoin the rotations once ready", zap.String("node", node))
	} else {
		log.Warn("swarm node does not answer: its tasks leave the rotations until one answers (R11t)",
			zap.String("node", node), zap.Duration("timeout", NodeProbeTimeout))
	}
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// run probes every interval until ctx is done; one node's probe is never
// started while its previous one runs.
func (w *nodeWatch) run(ctx context.Context, log *zap.Logger) {
	ticker := time.NewTicker(w.interval)
	defer ticker.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	busy := map[string]bool{}
	var busyMu sync.Mutex
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		for node, addrs := range w.round() {
			busyMu.Lock()
			if busy[node] {
				busyMu.Unlock()
				continue
			}
			busy[node] = true
			busyMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				answered := w.probe(ctx, addrs)
				if ctx.Err() == nil {
					w.verdict(node, answered, log)
				}
				busyMu.Lock()
				delete(busy, node)
				busyMu.Unlock()
			}()
		}
	}
}

// probe says whether any of addrs answers within NodeProbeTimeout: it
// accepts the connection, or refuses it (the node is there; that task
// does not listen).
func (w *nodeWatch) probe(ctx context.Context, addrs []string) bool {
	ctx, cancel := context.WithTimeout(ctx, NodeProbeTimeout)
	defer cancel()
	answers := make(chan bool, len(addrs))
	for _, a := range addrs {
		go func() {
			conn, err := w.dial(ctx, "tcp", a)
			if err == nil {
				_ = conn.Close()
			}
			answers <- err == nil || errors.Is(err, syscall.ECONNREFUSED)
		}()
	}
	for range addrs {
		if <-answers {
			return true
		}
	}
	return false
}

// probeAddr is where a task instance is probed: its address on the
// network its caddy.network label names, else its first, at its
// caddy.port; "" when it has no caddy.port (the route's port is not the
// adapter's to know) or no address.
func probeAddr(in catalog.Instance) string {
	port, err := strconv.ParseUint(in.Labels[catalog.LabelPort], 10, 16)
	if err != nil || port == 0 {
		return ""
	}
	want := in.Labels[catalog.LabelNetwork]
	for _, a := range in.Networks {
		if a.Address == "" || want != "" && a.Network != want {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			return netip.AddrPortFrom(ip, uint16(port)).String()
		}
	}
	return ""
}
