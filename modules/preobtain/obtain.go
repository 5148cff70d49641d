// Package preobtain has Caddy obtain the certificate of a host as soon as an
// instance claims it (the permission's obtain_on_claim, R7b), instead of
// at its first TLS handshake: through the tls app's own on-demand path,
// one name at a time, the claiming instances served in rotation, a failed
// name backed off.
package preobtain

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddytls"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// Obtaining a certificate as soon as a host is claimed (R7b), so that the
// first visitor does not wait for the CA. The bounds: only hosts an
// instance lists exactly (never a wildcard pattern) that the permission
// allows (its allow_suffix, selector; the R2c caps bound what a label can
// claim); at most obtainQueueCap names waiting, obtainPerClaimant per
// claiming instance, the instances served in rotation (queue.go);
// one obtain at a time, and a new one at most every obtainGap.
const (
	obtainQueueCap = 256
	obtainGap      = time.Second
	// obtainScanGap coalesces bursts of catalog changes: the claimed hosts
	// are walked at most this often.
	obtainScanGap = 250 * time.Millisecond
	// obtainStartWait is how long the obtainer waits for its config to be
	// the running one (Caddy's listeners, which answer the CA's challenges,
	// are up then) before it tries anyway.
	obtainStartWait = 30 * time.Second
	// A name whose obtain failed is not tried again by the obtainer for
	// obtainBackoffMin, doubling per failure up to obtainBackoffMax,
	// however often its label flaps (its first handshake still may);
	// obtainBackoffNames bounds how many such names it remembers.
	obtainBackoffMin   = time.Minute
	obtainBackoffMax   = time.Hour
	obtainBackoffNames = 4096
	// obtainOrphans bounds the obtains under way, those past
	// obtain_timeout included.
	obtainOrphans = 4
)

// obtainFailure is a name's backoff after a failed obtain.
type obtainFailure struct {
	until time.Time
	delay time.Duration
}

// Obtainer walks the claimed hosts of one permission's daemon after
// each change and has Caddy's certificate management get a certificate
// for each new one, exactly as the first TLS handshake for it would (the
// tls app's on-demand path: the permission is asked again, a certificate
// in storage is loaded rather than ordered, concurrent attempts for one
// name are one).
type Obtainer struct {
	perm   Permission
	ctx    caddy.Context
	logger *zap.Logger
	queue  *fairQueue
	// run ends with the config's context or at stop.
	run    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup

	// getCert is Caddy's GetCertificate for the name; built at the first
	// obtain (the tls app is provisioned by then), replaced in tests.
	getCert func(hello *tls.ClientHelloInfo) (*tls.Certificate, error)
	// started reports whether the obtainer's config is the one running.
	started func() bool
	// failed holds the names in backoff (the worker's alone).
	failed map[string]obtainFailure
	// orphans holds a token per obtain under way, the one waited for and
	// those left behind past obtain_timeout: at most obtainOrphans.
	orphans chan struct{}
}

// Permission is the on-demand TLS permission an Obtainer works for.
type Permission interface {
	// Snapshot is its daemon's catalog now.
	Snapshot() *catalog.Snapshot
	// Decide is its verdict on a normalized host, neither counted nor
	// logged: nil allows a certificate.
	Decide(host string) error
	// ObtainTimeout bounds the wait for one certificate (obtain_timeout).
	ObtainTimeout() time.Duration
}

// New returns the obtainer of p, not yet running.
func New(ctx caddy.Context, p Permission, logger *zap.Logger) *Obtainer {
	o := &Obtainer{
		perm:    p,
		ctx:     ctx,
		logger:  logger,
		queue:   newFairQueue(),
		failed:  make(map[string]obtainFailure),
		orphans: make(chan struct{}, obtainOrphans),
	}
	o.run, o.cancel = context.WithCancel(ctx)
	o.started = func() bool { return caddy.ActiveContext().Context == ctx.Context }
	return o
}

// Start runs the watcher and the worker until Stop or the config's end.
func (o *Obtainer) Start() {
	o.done.Add(2)
	go func() { defer o.done.Done(); o.watch() }()
	go func() { defer o.done.Done(); o.work() }()
}

// Stop ends both goroutines and returns once they have; an obtain under
// way is not interrupted (certmagic bounds it).
func (o *Obtainer) Stop() {
	o.cancel()
	o.done.Wait()
}

// watch queues the hosts claimed now, then those claimed by each change.
// A host that loses its last claim is forgotten, so that a claim again
// later is queued again (a certificate still cached or stored is then
// loaded, not ordered).
func (o *Obtainer) watch() {
	seen := make(map[string]struct{})
	for {
		snap := o.perm.Snapshot()
		seen = o.scan(seen)
		select {
		case <-snap.Changed():
		case <-o.run.Done():
			return
		}
		if !sleepCtx(o.run, obtainScanGap) {
			return
		}
	}
}

// scan queues each exactly claimed host the permission allows that was
// not seen before, and returns the hosts claimed now that are queued or
// were before. A host that finds the queue full is not marked seen, so the
// next scan tries it again.
func (o *Obtainer) scan(seen map[string]struct{}) map[string]struct{} {
	next := make(map[string]struct{}, len(seen))
	full := false
	o.perm.Snapshot().EachClaimedHost(func(host, claimant string) bool {
		if _, ok := seen[host]; ok {
			next[host] = struct{}{}
			return true
		}
		if o.perm.Decide(host) != nil {
			return true
		}
		if o.queue.push(claimant, host) {
			next[host] = struct{}{}
		} else {
			full = true
		}
		return true
	})
	if full {
		o.logger.Warn("obtain_on_claim: more newly claimed hosts than it queues; the rest are tried after the queue empties (or at their first handshake)",
			zap.Int("queue", obtainQueueCap), zap.Int("per_instance", obtainPerClaimant))
	}
	return next
}

// work obtains the queued hosts' certificates one at a time, at most one
// start per obtainGap, once the config runs.
func (o *Obtainer) work() {
	if !o.waitStarted() {
		return
	}
	for {
		host, ok := o.queue.pop(o.run)
		if !ok {
			return
		}
		if o.perm.Decide(host) != nil {
			continue // lost its claim while it waited
		}
		if f, ok := o.failed[host]; ok && time.Now().Before(f.until) {
			o.logger.Debug("obtain_on_claim: the host failed before and is in backoff; its first handshake may still try",
				zap.String("host", host), zap.Time("until", f.until))
			continue // a flapping label re-orders nothing
		}
		o.obtain(host)
		if !sleepCtx(o.run, obtainGap) {
			return
		}
	}
}

// waitStarted waits until this config runs (or obtainStartWait passed),
// and reports false if the config ended first.
func (o *Obtainer) waitStarted() bool {
	deadline := time.Now().Add(obtainStartWait)
	for !o.started() && time.Now().Before(deadline) {
		if !sleepCtx(o.run, 50*time.Millisecond) {
			return false
		}
	}
	return o.run.Err() == nil
}

// obtain has Caddy get the certificate for host as a handshake would, and
// logs the outcome.
func (o *Obtainer) obtain(host string) {
	start := time.Now()
	err := o.getCertificateWithin(host, o.perm.ObtainTimeout())
	took := time.Since(start)
	if err != nil {
		f := o.backOff(host)
		o.logger.Warn("obtain_on_claim: no certificate for the newly claimed host; its first handshake tries again",
			zap.String("host", host), zap.Duration("took", took), zap.Duration("backoff", f.delay), zap.Error(err))
		return
	}
	delete(o.failed, host)
	o.logger.Info("obtain_on_claim: certificate ready for the newly claimed host",
		zap.String("host", host), zap.Duration("took", took))
}

// backOff records a failed obtain of host: its backoff doubles from
// obtainBackoffMin up to obtainBackoffMax. At obtainBackoffNames names,
// the one whose backoff ends first is forgotten.
func (o *Obtainer) backOff(host string) obtainFailure {
	f, ok := o.failed[host]
	f.delay = min(max(2*f.delay, obtainBackoffMin), obtainBackoffMax)
	f.until = time.Now().Add(f.delay)
	if !ok && len(o.failed) >= obtainBackoffNames {
		var first string
		for name, g := range o.failed {
			if first == "" || g.until.Before(o.failed[first].until) {
				first = name
			}
		}
		delete(o.failed, first)
	}
	o.failed[host] = f
	return f
}

// errObtainTimeout is an obtain that took longer than obtain_timeout.
var errObtainTimeout = errors.New("obtain_timeout passed; the order goes on in the background, and the host backs off")

// getCertificateWithin is getCertificate, waited for at most timeout
// (obtain_timeout): past it, the worker goes on to the next host. The
// obtain goes on (certmagic bounds it); at most obtainOrphans of those
// run at once, and the worker waits for one to end before it leaves
// another behind.
func (o *Obtainer) getCertificateWithin(host string, timeout time.Duration) error {
	select {
	case o.orphans <- struct{}{}:
	case <-o.run.Done():
		return o.run.Err()
	}
	done := make(chan error, 1)
	go func() {
		defer func() { <-o.orphans }()
		done <- o.getCertificate(host)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errObtainTimeout
	case <-o.run.Done():
		return o.run.Err()
	}
}

// getCertificate asks the tls app's certificate selection for host.
func (o *Obtainer) getCertificate(host string) error {
	if o.getCert == nil {
		// A connection policy like an HTTPS server's: its GetCertificate
		// is the tls app's, through the automation policy for the name.
		// Built here, not at provision: the tls app provisions the
		// permission, and is ready only once that returned.
		policies := caddytls.ConnectionPolicies{new(caddytls.ConnectionPolicy)}
		if err := policies.Provision(o.ctx); err != nil {
			return fmt.Errorf("a TLS connection policy to obtain with: %w", err)
		}
		o.getCert = policies[0].TLSConfig.GetCertificate
	}
	_, err := o.getCert(&tls.ClientHelloInfo{
		ServerName:        host,
		SupportedVersions: []uint16{tls.VersionTLS13, tls.VersionTLS12},
		SignatureSchemes:  []tls.SignatureScheme{tls.ECDSAWithP256AndSHA256, tls.PSSWithSHA256, tls.PKCS1WithSHA256},
		SupportedCurves:   []tls.CurveID{tls.X25519, tls.CurveP256},
		CipherSuites:      []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256},
		Conn:              obtainConn{},
	})
	return err
}

// obtainConn is the connection certmagic logs a handshake's addresses
// from: none here, it is no client.
type obtainConn struct{ net.Conn }

type obtainAddr struct{}

func (obtainAddr) Network() string { return "obtain_on_claim" }
func (obtainAddr) String() string  { return "obtain_on_claim" }

func (obtainConn) RemoteAddr() net.Addr { return obtainAddr{} }
func (obtainConn) LocalAddr() net.Addr  { return obtainAddr{} }

// sleepCtx waits d, and reports false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
