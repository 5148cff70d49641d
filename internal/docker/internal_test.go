package docker

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/events"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

func TestEventContainer(t *testing.T) {
	ctr := func(action string) events.Message {
		return events.Message{Type: events.ContainerEventType, Action: events.Action(action), Actor: events.Actor{ID: "cid"}}
	}
	kill := func(signal string) events.Message {
		m := ctr("kill")
		m.Actor.Attributes = map[string]string{"signal": signal, "name": "web"}
		return m
	}
	netEv := func(action string, attrs map[string]string) events.Message {
		return events.Message{Type: events.NetworkEventType, Action: events.Action(action), Actor: events.Actor{ID: "nid", Attributes: attrs}}
	}
	cid := follow.Event{ID: "cid"}
	stopping := func(why string) follow.Event { return follow.Event{ID: "cid", Stopping: true, Why: why} }
	die := func(code string) events.Message {
		m := ctr("die")
		m.Actor.Attributes = map[string]string{"exitCode": code}
		return m
	}
	none := follow.Event{}
	tests := []struct {
		name string
		m    events.Message
		want follow.Event
		ok   bool
	}{
		{"start", ctr("start"), follow.Event{ID: "cid", Started: true}, true},
		{"die", ctr("die"), stopping("exited"), true},
		{"die, code 0", die("0"), stopping("exited with code 0"), true},
		{"die, a crash", die("1"), stopping("exited with code 1 (crashed or failed)"), true},
		{"die of SIGHUP", die("129"), stopping("exited with code 129 (killed by SIGHUP)"), true},
		{"die of SIGKILL", die("137"), stopping("exited with code 137 (killed by SIGKILL)"), true},
		{"stop", ctr("stop"), stopping("stopped (docker stop)"), true},
		{"kill SIGTERM (docker stop)", kill("15"), stopping("sent SIGTERM to stop (docker stop, or docker kill -s TERM)"), true},
		{"kill SIGKILL (docker rm -f)", kill("9"), stopping("killed with SIGKILL (docker kill, docker rm -f, or the end of a stop's grace period)"), true},
		{"kill SIGINT", kill("2"), stopping("sent SIGINT to stop (docker stop, or docker kill -s INT)"), true},
		{"kill named signal", kill("SIGQUIT"), stopping("sent SIGQUIT to stop (docker stop, or docker kill -s QUIT)"), true},
		{"kill SIGHUP (a reload)", kill("1"), none, false},
		{"kill SIGUSR1", kill("10"), none, false},
		{"kill without a signal", ctr("kill"), none, false},
		{"pause", ctr("pause"), cid, true},
		{"unpause", ctr("unpause"), cid, true},
		{"rename", ctr("rename"), cid, true},
		{"create", ctr("create"), cid, true},
		{"restart", ctr("restart"), cid, true},
		{"health", ctr("health_status: healthy"), cid, true},
		{"health unhealthy", ctr("health_status: unhealthy"), cid, true},
		{"destroy", ctr("destroy"), follow.Event{ID: "cid", Deleted: true}, true},
		{"exec_create", ctr("exec_create: /hello -healthcheck"), none, false},
		{"exec_die", ctr("exec_die"), none, false},
		{"attach", ctr("attach"), none, false},
		{"old Engine fields", events.Message{Type: events.ContainerEventType, Status: "start", ID: "old"}, follow.Event{ID: "old", Started: true}, true}, //nolint:staticcheck // testing the fallback
		{"network connect", netEv("connect", map[string]string{"container": "cid", "name": "bridge"}), cid, true},
		{"network disconnect", netEv("disconnect", map[string]string{"container": "cid"}), cid, true},
		{"network create", netEv("create", map[string]string{"name": "n"}), none, false},
		{"image event", events.Message{Type: events.ImageEventType, Action: "pull"}, none, false},
	}
	for _, tt := range tests {
		got, ok := ContainerEvent(tt.m)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: ContainerEvent = %+v, %v; want %+v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// The Engine is asked for exactly the events ContainerEvent uses.
func TestEventFilters(t *testing.T) {
	f := eventFilters()
	for _, typ := range []string{"container", "network"} {
		if !f.ExactMatch("type", typ) {
			t.Errorf("type %s not asked for", typ)
		}
	}
	if f.ExactMatch("type", "image") {
		t.Error("image events asked for")
	}
	for _, a := range []string{"start", "kill", "die", "stop", "pause", "unpause", "rename", "destroy", "create", "restart", "connect", "disconnect"} {
		if !f.ExactMatch("event", a) {
			t.Errorf("event %s not asked for", a)
		}
	}
	if !f.FuzzyMatch("event", "health_status: healthy") {
		t.Error("health_status events not asked for")
	}
	for _, a := range []string{"exec_create: /hello -healthcheck", "exec_start: /hello -healthcheck", "exec_die", "attach", "top"} {
		if f.FuzzyMatch("event", a) {
			t.Errorf("event %s asked for", a)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		call   string
		reason string // substring
		auth   bool
	}{
		{"nil", nil, "", "session ended", false},
		{"stream ended", follow.WrapCall("Events", io.EOF), "Events", "the Engine ended the connection", false},
		{"stream cut", follow.WrapCall("Events", io.ErrUnexpectedEOF), "Events", "the Engine ended the connection", false},
		{"reset", follow.WrapCall("Events", &net.OpError{Op: "read", Err: syscall.ECONNRESET}), "Events", "the Engine ended the connection", false},
		{"refused", follow.WrapCall("ContainerList", &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}), "ContainerList", "connection refused", false},
		{"socket permission", follow.WrapCall("Events", &net.OpError{Op: "dial", Err: syscall.EACCES}), "Events", "permission denied", true},
		{"unauthorized", follow.WrapCall("Events", errdefs.ErrUnauthenticated.WithMessage("authz plugin says no")), "Events", "refused this client", true},
		{"forbidden", follow.WrapCall("ContainerList", errdefs.ErrPermissionDenied.WithMessage("authz plugin: no")), "ContainerList", "permission denied", true},
		{"unknown CA", follow.WrapCall("Events", fmt.Errorf("Get: %w", x509.UnknownAuthorityError{})), "Events", "TLS handshake failed", true},
		{"other", errors.New("boom"), "", "boom", false},
	}
	for _, tt := range tests {
		call, reason, auth := describe(tt.err)
		if call != tt.call || !strings.Contains(reason, tt.reason) || auth != tt.auth {
			t.Errorf("%s: describe = %q, %q, %v; want %q, ~%q, %v", tt.name, call, reason, auth, tt.call, tt.reason, tt.auth)
		}
	}
}

// An invalid configuration is refused by New, naming the setting at
// fault, before anything connects.
func TestNewRefusesInvalidConfig(t *testing.T) {
	_, err := New(Config{Host: "http://10.0.0.5:2375"})
	if err == nil || !strings.HasPrefix(err.Error(), "address: ") {
		t.Errorf("New = %v, want an address error", err)
	}
}

// The loop logs why each session ended in the Docker Engine's words: an
// Engine that stays down is reported once at error level per distinct
// reason, then at debug level, until a listing succeeds; a session that
// had listed and then lost the Engine is a warning, unless the Engine
// refused this client.
func TestLoopLogs(t *testing.T) {
	refused := follow.WrapCall("ContainerList", &url.Error{Op: "Get", URL: "http://x", Err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}})
	denied := follow.WrapCall("Events", &net.OpError{Op: "dial", Err: syscall.EACCES})
	down := followtest.Ended{Err: refused}
	logs := followtest.PlaySessions((&Adapter{}).Loop(), Explain,
		down, down, down,
		followtest.Ended{Err: denied},
		down,
		followtest.Ended{Listed: true, Err: follow.WrapCall("Events", io.ErrUnexpectedEOF)},
		followtest.Ended{Listed: true, Err: denied}, // no reconnection fixes it: an error even after a listing
		down,
		down,
	)
	want := []string{
		"error cannot follow the Docker Engine: none of its containers are routed to until this is fixed",
		"debug still cannot follow the Docker Engine",
		"debug still cannot follow the Docker Engine",
		"error cannot follow the Docker Engine: none of its containers are routed to until this is fixed",
		"debug still cannot follow the Docker Engine",
		"info connected to the Docker Engine",
		"warn lost the Docker Engine: still routing to the last known containers, reconnecting",
		"info reconnected to the Docker Engine",
		"error cannot follow the Docker Engine: still routing to the containers it last reported",
		"error cannot follow the Docker Engine: still routing to the containers it last reported",
		"debug still cannot follow the Docker Engine",
	}
	if got := followtest.Lines(logs); !slices.Equal(got, want) {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := logs.All()[3]; e.ContextMap()["call"] != "Events" ||
		!strings.HasPrefix(fmt.Sprint(e.ContextMap()["error"]), "permission denied (the user running Caddy needs access to the Engine's socket): ") {
		t.Errorf("permission error fields %v", e.ContextMap())
	}
}
