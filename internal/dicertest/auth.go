package dicertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base32"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// methodScopes is the scope each RPC needs over TCP ("" = any valid token).
// A method missing from it is refused for every token.
var methodScopes = map[string]string{
	"ListInstances":   "instances:read",
	"GetInstance":     "instances:read",
	"StartInstance":   "instances:write",
	"StandbyInstance": "instances:write",
	"StopInstance":    "instances:write",
	"ListNetworks":    "networks:read",
	"GetNetwork":      "networks:read",
	"GetEvents":       "events:read",
	"GetHostInfo":     "",
}

var scopeResources = map[string]bool{
	"instances": true, "snapshots": true, "networks": true, "volumes": true,
	"images": true, "kernels": true, "tokens": true, "events": true,
}

type token struct {
	name   string
	scopes []string
}

type tokenNameKey struct{}

// AddToken creates a token and returns it in the daemon's format:
// "dicer_" + a 52-character lowercase base32 secret + "_" + the
// fingerprint (no fingerprint part for a NewWithCertificate daemon). No
// scopes means "*". It panics on a scope that is not "*" or RESOURCE:ACTION.
func (d *Daemon) AddToken(name string, scopes ...string) string {
	if len(scopes) == 0 {
		scopes = []string{"*"}
	}
	for _, s := range scopes {
		if !validScope(s) {
			panic(fmt.Sprintf("dicertest: invalid scope %q", s))
		}
	}
	var raw [32]byte
	_, _ = rand.Read(raw[:])
	secret := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(raw[:]))
	d.mu.Lock()
	d.tokens[sha256.Sum256([]byte(secret))] = &token{name: name, scopes: append([]string(nil), scopes...)}
	d.mu.Unlock()
	if d.customCert {
		return "dicer_" + secret
	}
	return "dicer_" + secret + "_" + d.fingerprint
}

func validScope(s string) bool {
	if s == "*" {
		return true
	}
	res, act, ok := strings.Cut(s, ":")
	if !ok || !scopeResources[res] {
		return false
	}
	return act == "read" || (act == "write" && res != "events")
}

// covers reports whether scopes grant need: "*" grants all, and a write
// scope also grants read of the same resource.
func covers(scopes []string, need string) bool {
	if need == "" {
		return true
	}
	res, act, _ := strings.Cut(need, ":")
	for _, s := range scopes {
		if s == "*" || s == need || (act == "read" && s == res+":write") {
			return true
		}
	}
	return false
}

// parseToken returns the secret of a token string: trimmed, "dicer_"
// prefix, split at the first "_", a secret of at least 32 ASCII letters or
// digits, and an optional fingerprint of 64 lowercase hex characters.
func parseToken(s string) (secret string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "dicer_")
	if !ok {
		return "", false
	}
	secret, fp, hasFP := strings.Cut(rest, "_")
	if len(secret) < 32 {
		return "", false
	}
	for _, c := range []byte(secret) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return "", false
		}
	}
	if hasFP {
		if len(fp) != 64 {
			return "", false
		}
		for _, c := range []byte(fp) {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return "", false
			}
		}
	}
	return secret, true
}

var errUnauthenticated = status.Error(codes.Unauthenticated, "unauthenticated")

// authenticate checks the caller's token for method and returns ctx carrying
// the token's name.
func (d *Daemon) authenticate(ctx context.Context, method string) (context.Context, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return nil, errUnauthenticated
	}
	raw, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok {
		return nil, errUnauthenticated
	}
	secret, ok := parseToken(raw)
	if !ok {
		return nil, errUnauthenticated
	}
	d.mu.Lock()
	tok := d.tokens[sha256.Sum256([]byte(secret))]
	d.mu.Unlock()
	if tok == nil {
		return nil, errUnauthenticated
	}
	need, known := methodScopes[method]
	if !known {
		return nil, status.Errorf(codes.PermissionDenied, "token %q may not call %s", tok.name, method)
	}
	if !covers(tok.scopes, need) {
		return nil, status.Errorf(codes.PermissionDenied, "token %q lacks scope %s", tok.name, need)
	}
	return context.WithValue(ctx, tokenNameKey{}, tok.name), nil
}

func methodName(fullMethod string) string {
	return fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
}

func (d *Daemon) count(fullMethod string) {
	d.mu.Lock()
	d.calls[methodName(fullMethod)]++
	d.mu.Unlock()
}

func (d *Daemon) callErr(fullMethod string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.callErrs[methodName(fullMethod)]
}

func (d *Daemon) countUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	d.count(info.FullMethod)
	return h(ctx, req)
}

func (d *Daemon) countStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	d.count(info.FullMethod)
	return h(srv, ss)
}

func (d *Daemon) authUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, err := d.authenticate(ctx, methodName(info.FullMethod))
	if err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (d *Daemon) authStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := d.authenticate(ss.Context(), methodName(info.FullMethod))
	if err != nil {
		return err
	}
	return h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
}

func (d *Daemon) failUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := d.callErr(info.FullMethod); err != nil {
		return nil, err
	}
	return h(ctx, req)
}

func (d *Daemon) failStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if err := d.callErr(info.FullMethod); err != nil {
		return err
	}
	return h(srv, ss)
}

type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *ctxStream) Context() context.Context { return s.ctx }

// selfSigned makes a certificate like the daemon's generated server.crt.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "dicerd"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	return cert, pemCert(der), nil
}

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// leafFingerprint is the hex SHA-256 of the leaf's SubjectPublicKeyInfo, or
// "" if the leaf cannot be parsed.
func leafFingerprint(cert tls.Certificate) string {
	leaf := cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return ""
		}
	}
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	return hex.EncodeToString(sum[:])
}
