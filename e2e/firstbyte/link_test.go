//go:build e2e && linux

package firstbyte

import (
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// delayedLink is a network namespace of the test's own, reached from
// this one over a veth pair whose both ends delay every packet (tc
// netem): a client there is a round trip of twice the delay from Caddy.
// It has no route out: its only neighbour is this end of the pair.
//
// Where the kernel has no netem (this machine's: "Specified qdisc kind is
// unknown", and no modules to load), the delay is a relay on this end of
// the pair instead (relay): it holds each chunk of bytes delay in each
// direction, so every exchange of the TLS handshake and the request takes
// the round trip, as netem would make it; only the TCP connect itself,
// which the measurement starts after, is not delayed.
type delayedLink struct {
	ns         string
	host, peer string // the addresses of this end and of the namespace's
	delay      time.Duration
	netem      bool // the kernel delays; else relays do
	once       sync.Once
}

// The pair's subnet: a /30 of addresses no one else here uses.
const (
	hostAddr = "10.215.0.1"
	peerAddr = "10.215.0.2"
)

func newDelayedLink(ns string, delay time.Duration) (*delayedLink, error) {
	l := &delayedLink{ns: ns, host: hostAddr, peer: peerAddr, delay: delay, netem: true}
	outer, inner := "cdfb"+suffix(ns)+"h", "cdfb"+suffix(ns)+"n"
	netem := []string{"qdisc", "add", "dev", "", "root", "netem", "delay", fmt.Sprintf("%dms", delay.Milliseconds())}
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns},
		{"ip", "addr", "add", hostAddr + "/30", "dev", outer},
		{"ip", "link", "set", outer, "up"},
		{"ip", "-n", ns, "addr", "add", peerAddr + "/30", "dev", inner},
		{"ip", "-n", ns, "link", "set", inner, "up"},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		append([]string{"tc"}, withDev(netem, outer)...),
		append([]string{"nsenter", "--net=/var/run/netns/" + ns, "tc"}, withDev(netem, inner)...),
	}
	for i, s := range steps {
		out, err := exec.Command(s[0], s[1:]...).CombinedOutput()
		if err != nil && i == len(steps)-2 && strings.Contains(string(out), "qdisc kind is unknown") {
			l.netem = false // no netem here: relays delay instead
			break
		}
		if err != nil {
			l.remove()
			return nil, fmt.Errorf("%s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return l, nil
}

// suffix is the last four characters of ns: interface names are short.
func suffix(ns string) string { return ns[max(0, len(ns)-4):] }

func withDev(args []string, dev string) []string {
	out := append([]string{}, args...)
	out[3] = dev
	return out
}

// remove deletes the namespace, and with it both ends of the pair.
func (l *delayedLink) remove() {
	l.once.Do(func() {
		_ = exec.Command("ip", "netns", "del", l.ns).Run()
	})
}

// inside is the command, run in the namespace.
func (l *delayedLink) inside(name string, args ...string) *exec.Cmd {
	return exec.Command("nsenter", append([]string{"--net=/var/run/netns/" + l.ns, name}, args...)...)
}
