package dicer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/follow"
	"github.com/caddy-dicer/caddy-dicer/internal/follow/followtest"
)

func TestDescribe(t *testing.T) {
	mismatch := fmt.Errorf("daemon certificate fingerprint %s %s %s", strings.Repeat("a", 64), fingerprintMismatch, strings.Repeat("b", 64))
	tests := []struct {
		err      error
		call     string
		reason   string
		wantCode codes.Code
	}{
		{
			follow.WrapCall("ListInstances", status.Error(codes.Unauthenticated, "unauthenticated")), "ListInstances",
			"daemon refused the token (UNAUTHENTICATED): check the token's secret", codes.Unauthenticated,
		},
		{
			follow.WrapCall("GetEvents", status.Error(codes.PermissionDenied, `token "caddy" lacks scope events:read`)), "GetEvents",
			`daemon refused the token (PERMISSION_DENIED): token "caddy" lacks scope events:read`, codes.PermissionDenied,
		},
		// How grpc-go reports a failed handshake: UNAVAILABLE, with the
		// VerifyConnection error quoted inside.
		{
			follow.WrapCall("GetEvents", status.Errorf(codes.Unavailable, "connection error: desc = %q", "transport: authentication handshake failed: "+mismatch.Error())), "GetEvents",
			"TLS handshake failed: " + mismatch.Error(), codes.Unavailable,
		},
		{
			follow.WrapCall("GetEvents", status.Errorf(codes.Unavailable, "connection error: desc = %q", "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority")), "GetEvents",
			"TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority", codes.Unavailable,
		},
		{follow.WrapCall("GetEvents", status.Error(codes.ResourceExhausted, "fell behind")), "GetEvents", "RESOURCE_EXHAUSTED: fell behind", codes.ResourceExhausted},
		{follow.WrapCall("GetEvents", io.EOF), "GetEvents", "the daemon ended the event stream", codes.Unavailable},
		{status.Error(codes.Unavailable, "connection refused"), "", "UNAVAILABLE: connection refused", codes.Unavailable},
		{follow.WrapCall("ListInstances", status.Error(codes.DeadlineExceeded, "too slow")), "ListInstances", "DEADLINE_EXCEEDED: too slow", codes.DeadlineExceeded},
	}
	for _, tt := range tests {
		call, reason, code := describe(tt.err)
		if call != tt.call || reason != tt.reason || code != tt.wantCode {
			t.Errorf("describe(%v) = %q, %q, %v\nwant %q, %q, %v", tt.err, call, reason, code, tt.call, tt.reason, tt.wantCode)
		}
	}
}

func TestVerifyFingerprint(t *testing.T) {
	cert := &x509.Certificate{RawSubjectPublicKeyInfo: []byte("spki")}
	fp := Fingerprint(cert.RawSubjectPublicKeyInfo)
	if len(fp) != 64 || strings.ToLower(fp) != fp {
		t.Fatalf("Fingerprint = %q, want 64 lowercase hex characters", fp)
	}
	cs := tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	if err := verifyFingerprint(cs, fp); err != nil {
		t.Fatalf("matching fingerprint: %v", err)
	}
	other := strings.Repeat("0", 64)
	err := verifyFingerprint(cs, other)
	want := "daemon certificate fingerprint " + fp + " does not match the token's " + other
	if err == nil || err.Error() != want {
		t.Fatalf("mismatch: %v, want %q", err, want)
	}
	if err := verifyFingerprint(tls.ConnectionState{}, fp); !errors.Is(err, errNoCertificate) {
		t.Fatalf("no certificate: %v", err)
	}
	// The pinned config skips chain checks and requires TLS 1.3.
	c := tlsConfig(nil, "", Token{Secret: secret52, Fingerprint: fp})
	if !c.InsecureSkipVerify || c.VerifyConnection == nil || c.MinVersion != tls.VersionTLS13 {
		t.Fatalf("pinned tls config: %+v", c)
	}
	c = tlsConfig(nil, "dicer.internal", Token{Secret: secret52})
	if c.InsecureSkipVerify || c.VerifyConnection != nil || c.ServerName != "dicer.internal" || c.MinVersion != tls.VersionTLS13 {
		t.Fatalf("CA tls config: %+v", c)
	}
}

func TestBearerCredentials(t *testing.T) {
	b := bearer("Bearer dicer_x")
	md, err := b.GetRequestMetadata(t.Context())
	if err != nil || md["authorization"] != "Bearer dicer_x" || len(md) != 1 {
		t.Fatalf("metadata %v, %v", md, err)
	}
	if !b.RequireTransportSecurity() {
		t.Fatal("the token must never travel without TLS")
	}
}

// The loop logs why each session ended in the Dicer daemon's words: a
// daemon that stays down is reported once at error level per distinct
// reason, then at debug level, until a listing succeeds; a session that
// had listed and then lost the stream is a warning, with its own wording
// when the daemon cut the follower off for falling behind.
func TestLoopLogs(t *testing.T) {
	refused := follow.WrapCall("GetEvents", status.Error(codes.Unavailable, "connection refused"))
	unauthenticated := follow.WrapCall("GetEvents", status.Error(codes.Unauthenticated, "unauthenticated"))
	down := followtest.Ended{Err: refused}
	logs := followtest.PlaySessions((&Adapter{}).Loop(), explain,
		down, down, down, down, down,
		followtest.Ended{Err: unauthenticated},
		down,
		followtest.Ended{Listed: true, Err: follow.WrapCall("GetEvents", status.Error(codes.ResourceExhausted, "fell behind"))},
		followtest.Ended{Listed: true, Err: follow.WrapCall("GetEvents", status.Error(codes.Unavailable, "transport closing"))},
		followtest.Ended{Listed: true, Err: unauthenticated}, // no reconnection fixes it: an error even after a listing
		down,
	)
	want := []string{
		// Before the first listing: one error per distinct reason (2),
		// the repeats (5) at debug level.
		"error cannot follow the Dicer daemon: none of its instances are routed to until this is fixed",
		"debug still cannot follow the Dicer daemon",
		"debug still cannot follow the Dicer daemon",
		"debug still cannot follow the Dicer daemon",
		"debug still cannot follow the Dicer daemon",
		"error cannot follow the Dicer daemon: none of its instances are routed to until this is fixed",
		"debug still cannot follow the Dicer daemon",
		// After it.
		"info connected to the Dicer daemon",
		"warn fell behind the Dicer daemon's events and was cut off: reconnecting to re-list",
		"info reconnected to the Dicer daemon",
		"warn lost the Dicer daemon: still routing to the last known instances, reconnecting",
		"info reconnected to the Dicer daemon",
		"error cannot follow the Dicer daemon: still routing to the instances it last reported",
		"error cannot follow the Dicer daemon: still routing to the instances it last reported",
	}
	if got := followtest.Lines(logs); !slices.Equal(got, want) {
		t.Fatalf("logs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	e := logs.All()[5]
	if got := e.ContextMap()["error"]; got != "daemon refused the token (UNAUTHENTICATED): check the token's secret" {
		t.Fatalf("error field %q", got)
	}
	if got := e.ContextMap()["call"]; got != "GetEvents" {
		t.Fatalf("call field %q", got)
	}
}

// What an instance event tells before the fetch: only a deletion; the
// fetch tells the state.
func TestInstanceEvent(t *testing.T) {
	for _, tt := range []struct {
		action dicerpb.EventAction
		want   follow.Event
	}{
		{dicerpb.EventAction_EVENT_ACTION_DELETED, follow.Event{ID: "i", Deleted: true}},
		{dicerpb.EventAction_EVENT_ACTION_STOPPED, follow.Event{ID: "i"}},
		{dicerpb.EventAction_EVENT_ACTION_EXITED, follow.Event{ID: "i"}},
		{dicerpb.EventAction_EVENT_ACTION_DIED, follow.Event{ID: "i"}},
		{dicerpb.EventAction_EVENT_ACTION_STARTED, follow.Event{ID: "i"}},
		{dicerpb.EventAction_EVENT_ACTION_STANDBY, follow.Event{ID: "i"}},
		{dicerpb.EventAction_EVENT_ACTION_PAUSED, follow.Event{ID: "i"}},
		{dicerpb.EventAction_EVENT_ACTION_HEALTHY, follow.Event{ID: "i"}},
	} {
		ev := &dicerpb.Event{Kind: dicerpb.EventKind_EVENT_KIND_INSTANCE, Id: "i", Action: tt.action}
		if got := instanceEvent(ev); got != tt.want {
			t.Errorf("%v: %+v, want %+v", tt.action, got, tt.want)
		}
	}
}
