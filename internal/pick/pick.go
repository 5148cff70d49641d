// Package pick is how a selection policy learns which instance an
// upstream is: the upstream sources record, per request, the upstreams
// they handed out with their instances' weights and identities (R4c,
// R4d), and the policies of package lbpolicy read them. It is the one
// thing the sources and the policies share.
package pick

import (
	"net/http"
	"unsafe"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// How a selection policy learns which instance an upstream is (R4c, R4d).
//
// reverse_proxy hands a policy the very *Upstream values our source's
// GetUpstreams returned for this request, and nothing else of them. So
// GetUpstreams allocates each upstream inside a Upstream that also
// holds its instance's weight and identity, and leaves the block in the
// request's variables (caddyhttp.SetVar), which live as long as the
// request and no longer: no global table, nothing keyed by address, and a
// `dynamic multi` or a retry only adds blocks. The policy finds an
// upstream's block by its address (inBlock). A source does this only on a
// route whose policy reads it (Reader), so other policies cost
// nothing more.

// picksVar is the request variable holding the request's *Picks.
const picksVar = "dicer_picks"

// Upstream is an upstream GetUpstreams returned, with what the
// placeholders and metrics of who served a request (R13a, R13b) and the
// selection policies (R4c, R4d) need of the instance it goes to.
// reverse_proxy gets a pointer to the embedded Upstream.
type Upstream struct {
	reverseproxy.Upstream
	// Name is the instance's name.
	Name string
	// Weight is its weight (R4c): runtime, else caddy.weight, else 1.
	Weight int
	// Identity is what sticky sessions key it by (R4d).
	Identity string
}

// Picks is every block of upstreams the sources handed out for one
// request, oldest first.
type Picks struct {
	blocks [][]Upstream
}

// String keeps the variable short where a placeholder prints it.
func (*Picks) String() string { return "" }

// Reader is a selection policy that reads the picks: a source records
// them only for a route whose policy is one.
type Reader interface{ ReadsPicks() }

// Record leaves block in r's variables for the route's policy.
func Record(r *http.Request, block []Upstream) {
	vars, _ := r.Context().Value(caddyhttp.VarsCtxKey).(map[string]any)
	if vars == nil {
		return // not served by Caddy's HTTP app (unit tests)
	}
	p, _ := vars[picksVar].(*Picks)
	if p == nil {
		p = &Picks{blocks: make([][]Upstream, 0, 2)}
		vars[picksVar] = p
	}
	p.blocks = append(p.blocks, block)
}

// Of returns what the request's sources recorded, nil if none.
func Of(r *http.Request) *Picks {
	p, _ := caddyhttp.GetVar(r.Context(), picksVar).(*Picks)
	return p
}

// Find returns what GetUpstreams knew of u, nil for an upstream it did not
// hand out (a static one, a stand-in): newest block first, since a retry
// adds a block and only the newest holds the upstreams of this attempt.
// It costs a comparison per block; no allocation.
func (p *Picks) Find(u *reverseproxy.Upstream) *Upstream {
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
func inBlock(block []Upstream, u *reverseproxy.Upstream) *Upstream {
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

// WeightOf is u's weight (R4c): 1 when GetUpstreams did not hand it out.
func (p *Picks) WeightOf(u *reverseproxy.Upstream) int {
	if pu := p.Find(u); pu != nil {
		return pu.Weight
	}
	return catalog.DefaultWeight
}

// IdentityOf is what sticky sessions key u by (R4d): its instance's
// identity, or, for an upstream GetUpstreams did not hand out, its
// address.
func (p *Picks) IdentityOf(u *reverseproxy.Upstream) string {
	if pu := p.Find(u); pu != nil {
		return pu.Identity
	}
	return "dial:" + u.Dial
}

// HandlerReads reports whether h's selection policy reads the picks
// (policies are provisioned before upstream sources).
func HandlerReads(h *reverseproxy.Handler) bool {
	if h == nil || h.LoadBalancing == nil {
		return false
	}
	_, ok := h.LoadBalancing.SelectionPolicy.(Reader)
	return ok
}
