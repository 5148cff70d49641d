package lbpolicy

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/pick"
)

func init() {
	caddy.RegisterModule(StickySelection{})
}

// StickySelection keeps each client on the instance its first request went
// to, by a cookie keyed by the instance's identity, not its address (R4d):
// its `caddy.session_key` label, else what its daemon calls its place (a
// Swarm task: service and slot), else its name. A replacement that takes
// over the identity (a container recreated under the same name, a Swarm
// task in the same slot, a new instance with the same session key) keeps
// the sessions; when no available upstream has it, the request goes
// where the fallback policy says and gets a new cookie, so the session
// moves once. The cookie holds an HMAC of the identity, never the
// identity: a client can neither forge one for an instance nor learn the
// instances' names.
//
// Caddy's `lb_policy cookie` hashes the upstream's address instead, so
// every redeploy that changes addresses moves every session.
type StickySelection struct {
	// Name is the cookie's name. Default: `dicer_session`.
	Name string `json:"name,omitempty"`

	// Secret keys the HMAC; placeholders such as `{env.STICKY_SECRET}`
	// are replaced at provision. Default: a random secret kept in Caddy's
	// storage (`caddy-dicer/sticky-secret`), so that sessions survive a
	// reload and a restart, and Caddys that share storage share it.
	Secret string `json:"secret,omitempty"`

	// MaxAge is the cookie's lifetime. Default: a session cookie.
	MaxAge caddy.Duration `json:"max_age,omitempty"`

	// FallbackRaw is the policy that places a new session, or one whose
	// identity no available upstream has. Default: `dicer_weighted`.
	FallbackRaw json.RawMessage `json:"fallback,omitempty" caddy:"namespace=http.reverse_proxy.selection_policies inline_key=policy"`

	fallback reverseproxy.Selector
	macs     *macCache
}

// CaddyModule returns the Caddy module information.
func (StickySelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.dicer_sticky",
		New: func() caddy.Module { return new(StickySelection) },
	}
}

// stickySecretKey is where the default secret is kept in Caddy's storage.
const stickySecretKey = "caddy-dicer/sticky-secret"

// Provision loads the fallback policy and the secret.
func (s *StickySelection) Provision(ctx caddy.Context) error {
	if s.Name == "" {
		s.Name = "dicer_session"
	}
	if s.FallbackRaw == nil {
		s.FallbackRaw = caddyconfig.JSONModuleObject(WeightedSelection{}, "policy", "dicer_weighted", nil)
	}
	mod, err := ctx.LoadModule(s, "FallbackRaw")
	if err != nil {
		return fmt.Errorf("dicer_sticky: loading the fallback policy: %w", err)
	}
	s.fallback = mod.(reverseproxy.Selector)
	secret := caddy.NewReplacer().ReplaceAll(s.Secret, "")
	if secret == "" {
		if secret, err = storedSecret(ctx); err != nil {
			return fmt.Errorf("dicer_sticky: secret: %w", err)
		}
	}
	s.macs = &macCache{key: []byte(secret), route: s.Name, byIdentity: make(map[macKey]string)}
	return nil
}

// storedSecret returns the secret kept in Caddy's storage, made at the
// first call.
func storedSecret(ctx caddy.Context) (string, error) {
	storage := ctx.Storage()
	if err := storage.Lock(ctx, stickySecretKey); err != nil {
		return "", fmt.Errorf("locking %s in storage: %w", stickySecretKey, err)
	}
	defer storage.Unlock(ctx, stickySecretKey) //nolint:errcheck // nothing to do about it
	b, err := storage.Load(ctx, stickySecretKey)
	if err == nil && len(b) >= 32 {
		return string(b), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("loading %s from storage: %w", stickySecretKey, err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	secret := base64.RawURLEncoding.EncodeToString(raw)
	if err := storage.Store(ctx, stickySecretKey, []byte(secret)); err != nil {
		return "", fmt.Errorf("storing %s: %w", stickySecretKey, err)
	}
	return secret, nil
}

// Select sends a request with a valid cookie to an available upstream
// with the cookie's identity (by weight among several: the old and the
// new instance of a rolling update), else where the fallback says, with a
// new cookie.
func (s *StickySelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, w http.ResponseWriter) *reverseproxy.Upstream {
	p := pick.Of(r)
	host := catalog.NormalizeHost(r.Host)
	if c, err := r.Cookie(s.Name); err == nil && c.Value != "" {
		value := c.Value
		match := func(u *reverseproxy.Upstream) bool {
			return hmac.Equal([]byte(s.macs.of(host, p.IdentityOf(u))), []byte(value))
		}
		if u := selectWeighted(pool, p, match); u != nil {
			return u
		}
	}
	u := s.fallback.Select(pool, r, w)
	if u == nil {
		return nil
	}
	http.SetCookie(w, s.cookie(r, s.macs.of(host, p.IdentityOf(u))))
	return u
}

// cookie is the session cookie for value, as Caddy's cookie policy makes
// it: Secure and SameSite=None over HTTPS (or from a trusted proxy that
// says so), else SameSite=Lax.
func (s *StickySelection) cookie(r *http.Request, value string) *http.Cookie {
	c := &http.Cookie{Name: s.Name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode}
	https := r.TLS != nil
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		values := r.Header.Values("X-Forwarded-Proto")
		https = https || len(values) > 0 && strings.TrimSpace(values[len(values)-1]) == "https"
	}
	if https {
		c.Secure, c.SameSite = true, http.SameSiteNoneMode
	}
	if s.MaxAge > 0 {
		c.MaxAge = int(time.Duration(s.MaxAge).Seconds())
	}
	return c
}

// ReadsPicks marks the policy as one that reads the picks.
func (*StickySelection) ReadsPicks() {}

// macCache is the cookie value of each identity on each host: an
// HMAC-SHA256 under the secret of the policy's route (its cookie name),
// the host the client asked for and the identity, 128 bits of it,
// base64url (R4d). A cookie earned on one host or route is a new session
// on another: it cannot pin a client to an instance, a warm spare say,
// that new sessions there never reach. It remembers at most maxMACs
// values (then it starts over), so that a request costs a map lookup per
// upstream rather than an HMAC, and no caller can grow it without bound.
type macCache struct {
	key []byte
	// route is what, beside the host, the MAC is bound to: the policy's
	// cookie name (routes with one secret and one cookie name are one
	// route to their clients' cookies).
	route      string
	mu         sync.RWMutex
	byIdentity map[macKey]string
}

// macKey is one cached value's host and identity; a struct of strings
// is a map key without an allocation.
type macKey struct{ host, identity string }

const maxMACs = 4096

func (m *macCache) of(host, identity string) string {
	k := macKey{host, identity}
	m.mu.RLock()
	v, ok := m.byIdentity[k]
	m.mu.RUnlock()
	if ok {
		return v
	}
	h := hmac.New(sha256.New, m.key)
	for _, part := range [...]string{m.route, host, identity} {
		// Each part with its length first, so that no two triples
		// read the same.
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	v = base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:16])
	m.mu.Lock()
	if len(m.byIdentity) >= maxMACs {
		clear(m.byIdentity)
	}
	m.byIdentity[k] = v
	m.mu.Unlock()
	return v
}

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens. Syntax:
//
//	lb_policy dicer_sticky [<name> [<secret>]] {
//		fallback <policy>
//		max_age  <duration>
//	}
func (s *StickySelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // policy name
	args := d.RemainingArgs()
	switch len(args) {
	case 0:
	case 1:
		s.Name = args[0]
	case 2:
		s.Name, s.Secret = args[0], args[1]
	default:
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "fallback":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if s.FallbackRaw != nil {
				return d.Err("fallback already specified")
			}
			name := d.Val()
			unm, err := caddyfile.UnmarshalModule(d, "http.reverse_proxy.selection_policies."+name)
			if err != nil {
				return err
			}
			sel, ok := unm.(reverseproxy.Selector)
			if !ok {
				return d.Errf("%s is not a selection policy", name)
			}
			s.FallbackRaw = caddyconfig.JSONModuleObject(sel, "policy", name, nil)
		case "max_age":
			if !d.NextArg() {
				return d.ArgErr()
			}
			if s.MaxAge != 0 {
				return d.Err("max_age already specified")
			}
			age, err := caddy.ParseDuration(d.Val())
			if err != nil || age <= 0 {
				return d.Errf("max_age: %q is not a positive duration", d.Val())
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			s.MaxAge = caddy.Duration(age)
		default:
			return d.Errf("unrecognized dicer_sticky setting '%s'", d.Val())
		}
	}
	return nil
}

// Interface guards
var (
	_ reverseproxy.Selector = (*StickySelection)(nil)
	_ caddy.Provisioner     = (*StickySelection)(nil)
	_ caddyfile.Unmarshaler = (*StickySelection)(nil)
	_ pick.Reader           = (*StickySelection)(nil)
)
