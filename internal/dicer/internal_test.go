package dicer

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestBackoff(t *testing.T) {
	b := newBackoff(0, 0)
	if b.min != DefaultMinBackoff || b.max != DefaultMaxBackoff {
		t.Fatalf("defaults %v..%v, want %v..%v", b.min, b.max, DefaultMinBackoff, DefaultMaxBackoff)
	}
	b = newBackoff(100*time.Millisecond, time.Second)
	caps := []time.Duration{100, 200, 400, 800, 1000, 1000, 1000}
	for i, c := range caps {
		c *= time.Millisecond
		d := b.next()
		if d < c/2 || d > c {
			t.Fatalf("delay %d = %v, want within [%v, %v]", i, d, c/2, c)
		}
	}
	b.reset()
	if d := b.next(); d < 50*time.Millisecond || d > 100*time.Millisecond {
		t.Fatalf("after reset: %v, want within [50ms, 100ms]", d)
	}
	// Many steps never overflow past the cap.
	for range 200 {
		if d := b.next(); d <= 0 || d > time.Second {
			t.Fatalf("delay %v out of bounds", d)
		}
	}
	// max below min is raised to min.
	if b := newBackoff(time.Second, time.Millisecond); b.max != time.Second {
		t.Fatalf("max %v, want raised to min", b.max)
	}
}

func TestQueueCoalesces(t *testing.T) {
	q := newQueue()
	for range 100 {
		q.add("a", false)
	}
	q.add("b", false)
	q.add("c", false)
	q.add("c", true) // the last event wins: deleted
	q.networksChanged()
	select {
	case <-q.notify:
	default:
		t.Fatal("no notification")
	}
	select {
	case <-q.notify:
		t.Fatal("more than one pending notification")
	default:
	}
	ids, nets := q.take()
	if len(ids) != 3 || ids["a"] || ids["b"] || !ids["c"] || !nets {
		t.Fatalf("take = %v, %v", ids, nets)
	}
	if ids, nets := q.take(); len(ids) != 0 || nets {
		t.Fatalf("second take = %v, %v, want empty", ids, nets)
	}
}

func TestDescribe(t *testing.T) {
	mismatch := fmt.Errorf("daemon certificate fingerprint %s %s %s", strings.Repeat("a", 64), fingerprintMismatch, strings.Repeat("b", 64))
	tests := []struct {
		err      error
		call     string
		reason   string
		wantCode codes.Code
	}{
		{
			wrapCall("ListInstances", status.Error(codes.Unauthenticated, "unauthenticated")), "ListInstances",
			"daemon refused the token (UNAUTHENTICATED): check the token's secret", codes.Unauthenticated,
		},
		{
			wrapCall("GetEvents", status.Error(codes.PermissionDenied, `token "caddy" lacks scope events:read`)), "GetEvents",
			`daemon refused the token (PERMISSION_DENIED): token "caddy" lacks scope events:read`, codes.PermissionDenied,
		},
		// How grpc-go reports a failed handshake: UNAVAILABLE, with the
		// VerifyConnection error quoted inside.
		{
			wrapCall("GetEvents", status.Errorf(codes.Unavailable, "connection error: desc = %q", "transport: authentication handshake failed: "+mismatch.Error())), "GetEvents",
			"TLS handshake failed: " + mismatch.Error(), codes.Unavailable,
		},
		{
			wrapCall("GetEvents", status.Errorf(codes.Unavailable, "connection error: desc = %q", "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority")), "GetEvents",
			"TLS handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority", codes.Unavailable,
		},
		{wrapCall("GetEvents", status.Error(codes.ResourceExhausted, "fell behind")), "GetEvents", "RESOURCE_EXHAUSTED: fell behind", codes.ResourceExhausted},
		{wrapCall("GetEvents", io.EOF), "GetEvents", "the daemon ended the event stream", codes.Unavailable},
		{status.Error(codes.Unavailable, "connection refused"), "", "UNAVAILABLE: connection refused", codes.Unavailable},
		{wrapCall("ListInstances", status.Error(codes.DeadlineExceeded, "too slow")), "ListInstances", "DEADLINE_EXCEEDED: too slow", codes.DeadlineExceeded},
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
	c := tlsConfig(Config{}, Token{Secret: secret52, Fingerprint: fp})
	if !c.InsecureSkipVerify || c.VerifyConnection == nil || c.MinVersion != tls.VersionTLS13 {
		t.Fatalf("pinned tls config: %+v", c)
	}
	c = tlsConfig(Config{ServerName: "dicer.internal"}, Token{Secret: secret52})
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

// A daemon that stays down is reported once at error level per distinct
// reason, then at debug level, until a listing succeeds.
func TestLogEndDedupes(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	f := &follower{log: zap.New(core)}
	logged := map[string]bool{}
	refused := wrapCall("GetEvents", status.Error(codes.Unavailable, "connection refused"))
	for range 5 {
		f.logEnd(refused, false, time.Second, logged)
	}
	f.logEnd(wrapCall("GetEvents", status.Error(codes.Unauthenticated, "unauthenticated")), false, time.Second, logged)
	f.logEnd(refused, false, time.Second, logged)
	if n := logs.FilterLevelExact(zapcore.ErrorLevel).Len(); n != 2 {
		t.Fatalf("%d error entries, want 2 (one per distinct reason): %v", n, logs.All())
	}
	if n := logs.FilterLevelExact(zapcore.DebugLevel).Len(); n != 5 {
		t.Fatalf("%d debug entries, want 5", n)
	}
	e := logs.FilterLevelExact(zapcore.ErrorLevel).All()[1]
	if got := e.ContextMap()["error"]; got != "daemon refused the token (UNAUTHENTICATED): check the token's secret" {
		t.Fatalf("error field %q", got)
	}
	if got := e.ContextMap()["call"]; got != "GetEvents" {
		t.Fatalf("call field %q", got)
	}
	// A session that had listed and then lost the stream is a warning.
	logs.TakeAll()
	f.logEnd(wrapCall("GetEvents", status.Error(codes.Unavailable, "transport closing")), true, time.Second, map[string]bool{})
	if e := logs.TakeAll(); len(e) != 1 || e[0].Level != zapcore.WarnLevel {
		t.Fatalf("lost stream after listing: %v", e)
	}
}
