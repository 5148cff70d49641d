package lbpolicy

import (
	"math/rand/v2"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/pick"
)

func init() {
	caddy.RegisterModule(WeightedSelection{})
}

// WeightedSelection sends each request to an available upstream with a
// probability proportional to its instance's weight (R4c): its runtime
// weight if one is set (`caddy dicer weight`), else its `caddy.weight`
// label, else 1. Instances of weight 0 are warm spares: they get requests
// only when no upstream of positive weight is available. An upstream that
// is not one of our sources' (a static one) weighs 1.
//
// Caddy's own policies do not see these weights: `weighted_round_robin`
// weighs upstreams by their index in a static list, and the others treat
// every upstream alike, warm spares included.
//
//	lb_policy dicer_weighted
type WeightedSelection struct{}

// CaddyModule returns the Caddy module information.
func (WeightedSelection) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.selection_policies.dicer_weighted",
		New: func() caddy.Module { return new(WeightedSelection) },
	}
}

// Select picks an available upstream at random by weight: two passes over
// the pool, no allocation.
func (WeightedSelection) Select(pool reverseproxy.UpstreamPool, r *http.Request, _ http.ResponseWriter) *reverseproxy.Upstream {
	return selectWeighted(pool, pick.Of(r), nil)
}

// ReadsPicks marks the policy as one that reads the picks.
func (WeightedSelection) ReadsPicks() {}

// selectWeighted picks among the available upstreams of pool that only
// admits (nil: all) at random by weight, the warm spares (weight 0) only
// when none of positive weight is available (R4c).
func selectWeighted(pool reverseproxy.UpstreamPool, p *pick.Picks, only func(*reverseproxy.Upstream) bool) *reverseproxy.Upstream {
	total, spares := 0, 0
	for _, u := range pool {
		if !u.Available() || only != nil && !only(u) {
			continue
		}
		if w := p.WeightOf(u); w > 0 {
			total += w
		} else {
			spares++
		}
	}
	if total == 0 && spares == 0 {
		return nil
	}
	positive := total > 0
	n := spares
	if positive {
		n = total
	}
	at := rand.IntN(n)
	for _, u := range pool {
		if !u.Available() || only != nil && !only(u) {
			continue
		}
		w := p.WeightOf(u)
		switch {
		case positive && w > 0:
			at -= w
		case !positive:
			at--
		default:
			continue
		}
		if at < 0 {
			return u
		}
	}
	return nil // the pool changed under us: cannot happen, one request reads it
}

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens. Syntax:
//
//	lb_policy dicer_weighted
func (*WeightedSelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // policy name
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Errf("dicer_weighted has no settings: weights come from the instances (caddy.weight, caddy dicer weight)")
	}
	return nil
}

// Interface guards
var (
	_ reverseproxy.Selector = (*WeightedSelection)(nil)
	_ caddyfile.Unmarshaler = (*WeightedSelection)(nil)
	_ pick.Reader           = (*WeightedSelection)(nil)
)
