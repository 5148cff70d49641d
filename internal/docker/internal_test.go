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
	netEv := func(action string, attrs map[string]string) events.Message {
		return events.Message{Type: events.NetworkEventType, Action: events.Action(action), Actor: events.Actor{ID: "nid", Attributes: attrs}}
	}
	tests := []struct {
		name    string
		m       events.Message
		id      string
		deleted bool
		ok      bool
	}{
		{"start", ctr("start"), "cid", false, true},
		{"die", ctr("die"), "cid", false, true},
		{"stop", ctr("stop"), "cid", false, true},
		{"pause", ctr("pause"), "cid", false, true},
		{"unpause", ctr("unpause"), "cid", false, true},
		{"rename", ctr("rename"), "cid", false, true},
		{"create", ctr("create"), "cid", false, true},
		{"restart", ctr("restart"), "cid", false, true},
		{"health", ctr("health_status: healthy"), "cid", false, true},
		{"health unhealthy", ctr("health_status: unhealthy"), "cid", false, true},
		{"destroy", ctr("destroy"), "cid", true, true},
		{"exec_create", ctr("exec_create: /hello -healthcheck"), "", false, false},
		{"exec_die", ctr("exec_die"), "", false, false},
		{"kill", ctr("kill"), "", false, false},
		{"attach", ctr("attach"), "", false, false},
		{"old Engine fields", events.Message{Type: events.ContainerEventType, Status: "start", ID: "old"}, "old", false, true}, //nolint:staticcheck // testing the fallback
		{"network connect", netEv("connect", map[string]string{"container": "cid", "name": "bridge"}), "cid", false, true},
		{"network disconnect", netEv("disconnect", map[string]string{"container": "cid"}), "cid", false, true},
		{"network create", netEv("create", map[string]string{"name": "n"}), "", false, false},
		{"image event", events.Message{Type: events.ImageEventType, Action: "pull"}, "", false, false},
	}
	for _, tt := range tests {
		id, deleted, ok := eventContainer(tt.m)
		if id != tt.id || deleted != tt.deleted || ok != tt.ok {
			t.Errorf("%s: eventContainer = %q, %v, %v; want %q, %v, %v", tt.name, id, deleted, ok, tt.id, tt.deleted, tt.ok)
		}
	}
}

// The Engine is asked for exactly the events eventContainer uses.
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
	for _, a := range []string{"start", "die", "stop", "pause", "unpause", "rename", "destroy", "create", "restart", "connect", "disconnect"} {
		if !f.ExactMatch("event", a) {
			t.Errorf("event %s not asked for", a)
		}
	}
	if !f.FuzzyMatch("event", "health_status: healthy") {
		t.Error("health_status events not asked for")
	}
	for _, a := range []string{"exec_create: /hello -healthcheck", "exec_start: /hello -healthcheck", "exec_die", "kill", "attach", "top"} {
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
	logs := followtest.PlaySessions((&Adapter{}).Loop(), explain,
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
