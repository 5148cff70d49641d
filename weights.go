package caddydicer

import (
	"math/rand/v2"
	"net/http"
	"unsafe"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

func init() {
	caddy.RegisterModule(WeightedSelection{})
}

// How a selection policy learns which instance an upstream is (R4c, R4d).
//
// reverse_proxy hands a policy the very *Upstream values our source's
// GetUpstreams returned for this request, and nothing else of them. So
// GetUpstreams allocates each upstream inside a pickedUpstream that also
// holds its instance's weight and identity, and leaves the block in the
// request's variables (caddyhttp.SetVar), which live as long as the
// request and no longer: no global table, nothing keyed by address, and a
// `dynamic multi` or a retry only adds blocks. The policy finds an
// upstream's block by its address (inBlock). A source does this only on a
// route whose policy reads it (readsPicks), so other policies cost
// nothing more.

// picksVar is the request variable holding the request's *picks.
const picksVar = "dicer_picks"

// picks is every block of upstreams our sources handed out for one
// request, oldest first.
type picks struct {
	blocks [][]pickedUpstream
}

// String keeps the variable short where a placeholder prints it.
func (*picks) String() string { return "" }

// picksReader is a selection policy that reads the picks: a source records
// them only for a route whose policy is one.
type picksReader interface{ readsPicks() }

// recordPicks leaves block in r's variables for the route's policy.
func recordPicks(r *http.Request, block []pickedUpstream) {
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if vars == nil {
		return // not served by Caddy's HTTP app (unit tests)
	}
	p, _ := vars[picksVar].(*picks)
	if p == nil {
		p = &picks{blocks: make([][]pickedUpstream, 0, 2)}
		vars[picksVar] = p
	}
	p.blocks = append(p.blocks, block)
}

// picksOf returns what the request's sources recorded, nil if none.
func picksOf(r *http.Request) *picks {
	p, _ := caddyhttp.GetVar(r.Context(), picksVar).(*picks)
	return p
}

// find returns what GetUpstreams knew of u, nil for an upstream it did not
// hand out (a static one, a stand-in): newest block first, since a retry
// adds a block and only the newest holds the upstreams of this attempt.
// It costs a comparison per block; no allocation.
func (p *picks) find(u *reverseproxy.Upstream) *pickedUpstream {
	if p == nil {
		return nil
	}
	for i := len(p.blocks) - 1; i >= 0; i-- {
		if pu := inBlock(p.blocks[i], u); pu != nil {
			return pu
		}
	}
	return nil
}

// inBlock returns the element of block whose upstream u is, if any, by
// address arithmetic: block is one allocation, and up is its elements'
// first field. Only pointers are turned into numbers, never back.
func inBlock(block []pickedUpstream, u *reverseproxy.Upstream) *pickedUpstream {
	if len(block) == 0 {
		return nil
	}
	size := unsafe.Sizeof(block[0])
	base, at := uintptr(unsafe.Pointer(&block[0].Upstream)), uintptr(unsafe.Pointer(u))
	if at < base || at >= base+size*uintptr(len(block)) || (at-base)%size != 0 {
		return nil
	}
	pu := &block[(at-base)/size]
	if &pu.Upstream != u {
		return nil
	}
	return pu
}

// weightOf is u's weight (R4c): 1 when GetUpstreams did not hand it out.
func (p *picks) weightOf(u *reverseproxy.Upstream) int {
	if pu := p.find(u); pu != nil {
		return pu.weight
	}
	return catalog.DefaultWeight
}

// identityOf is what sticky sessions key u by (R4d): its instance's
// identity, or, for an upstream GetUpstreams did not hand out, its
// address.
func (p *picks) identityOf(u *reverseproxy.Upstream) string {
	if pu := p.find(u); pu != nil {
		return pu.identity
	}
	return "dial:" + u.Dial
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
	return selectWeighted(pool, picksOf(r), nil)
}

func (WeightedSelection) readsPicks() {}

// selectWeighted picks among the available upstreams of pool that only
// admits (nil: all) at random by weight, the warm spares (weight 0) only
// when none of positive weight is available (R4c).
func selectWeighted(pool reverseproxy.UpstreamPool, p *picks, only func(*reverseproxy.Upstream) bool) *reverseproxy.Upstream {
	total, spares := 0, 0
	for _, u := range pool {
		if !u.Available() || only != nil && !only(u) {
			continue
		}
		if w := p.weightOf(u); w > 0 {
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
		w := p.weightOf(u)
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
	_ picksReader           = (*WeightedSelection)(nil)
)

// policyReadsPicks reports whether h's selection policy reads the picks
// (policies are provisioned before upstream sources).
func policyReadsPicks(h *reverseproxy.Handler) bool {
	if h == nil || h.LoadBalancing == nil {
		return false
	}
	_, ok := h.LoadBalancing.SelectionPolicy.(picksReader)
	return ok
}
