package caddydicer

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// PageSettings are a route's settings of the pages a browser gets
// instead of an upstream's answer: the page while an instance wakes
// (R5h) and the maintenance page (R5i). See docs/waiting-and-maintenance-pages.md.
type PageSettings struct {
	// WakePageAfter is how long a request that accepts text/html (a
	// browser's navigation) is held while the instance it needs wakes
	// (Docker scale to zero) before it is answered with a page that
	// reloads itself every second until the instance is ready. Other
	// clients are held up to wake_timeout as before. `off` (JSON: -1)
	// holds browsers as other clients. Example: `5s`. Default: `3s`.
	WakePageAfter caddy.Duration `json:"wake_page_after,omitempty"`

	// PageTemplate is a file holding the page, in Go's template language
	// (parsed with html/template, which escapes every value where it
	// lands), executed with pages.Data: .Kind ("waking", "maintenance",
	// "unavailable"), .Host, .Message, .Refresh and .RetryAfter (seconds).
	// Read at provision; an error in it is a config error. Example:
	// `/etc/caddy/waiting.html`. Default: a built-in page.
	PageTemplate string `json:"page_template,omitempty"`

	pageAfter time.Duration // 0: off
	pages     *pages.Server
}

// defaultWakePageAfter is wake_page_after's default.
const defaultWakePageAfter = 3 * time.Second

// maintenanceRetryAfter is the Retry-After of a maintenance page.
const maintenanceRetryAfter = 30

// wakePageRefresh is how often the waking page reloads, in seconds: with
// each reload held up to wake_page_after, a browser reaches the instance
// at most this long after it is ready (R5h).
const wakePageRefresh = 1

// provisionPages checks the settings and makes the route's page server
// (it listens at its first page).
func (p *PageSettings) provisionPages() error {
	switch {
	case p.WakePageAfter < 0:
		p.pageAfter = 0
	case p.WakePageAfter == 0:
		p.pageAfter = defaultWakePageAfter
	default:
		p.pageAfter = time.Duration(p.WakePageAfter)
	}
	var tmpl *pages.Template
	if p.PageTemplate != "" {
		var err error
		if tmpl, err = pages.ParseFile(p.PageTemplate); err != nil {
			return setting.Errorf("page_template", "%v", err)
		}
	}
	p.pages = pages.NewServer(tmpl)
	return nil
}

// cleanupPages closes the page server.
func (p *PageSettings) cleanupPages() {
	if p.pages != nil {
		_ = p.pages.Close()
	}
}

// unmarshalPageSetting reads wake_page_after or page_template, if the
// dispenser is at one (ok).
func (p *PageSettings) unmarshalPageSetting(d *caddyfile.Dispenser, seen map[string]bool) (ok bool, err error) {
	name, ok, err := settingAt(d, seen, "wake_page_after", "page_template")
	if !ok || err != nil {
		return ok, err
	}
	var raw string
	if err := oneValue(d, &raw); err != nil {
		return true, err
	}
	if name == "page_template" {
		p.PageTemplate = raw
		return true, nil
	}
	if raw == "off" {
		p.WakePageAfter = -1
		return true, nil
	}
	dur, err := caddy.ParseDuration(raw)
	if err != nil || dur <= 0 {
		return true, settingErrf(d, name, "%q is not a positive duration (e.g. 3s) nor off", raw)
	}
	p.WakePageAfter = caddy.Duration(dur)
	return true, nil
}

// page returns the upstream that answers r with d's page, and sets on r
// the header that says which (pages.Header); nil if there is no page
// server to answer.
func (p *PageSettings) page(r *http.Request, logger *zap.Logger, d pages.Data) *reverseproxy.Upstream {
	if p.pages == nil {
		return nil
	}
	dial, err := p.pages.Dial()
	if err != nil && logger != nil {
		logger.Error("cannot answer with a page", zap.Error(err))
	}
	if dial == "" {
		return nil
	}
	r.Header.Set(pages.Header, p.pages.Sign(d))
	return &reverseproxy.Upstream{Dial: dial}
}

// maintenancePage answers a request that found no target on a route with
// instances in maintenance for its host (R5i): 503 with the page (HTML or
// one line), whoever the client. nil: none is.
func (s *upstreamSource) maintenancePage(r *http.Request, snap *catalog.Snapshot, host string) []*reverseproxy.Upstream {
	msg, ok := snap.Maintenance(s.route, host)
	if !ok {
		return nil
	}
	u := s.page(r, s.logger, pages.Data{Kind: pages.KindMaintenance, Host: r.Host, Message: msg, RetryAfter: maintenanceRetryAfter})
	if u == nil {
		return nil
	}
	return []*reverseproxy.Upstream{u}
}

// removedPage answers a request that found nothing to route to nor to
// wake, for a host whose instance was removed while on standby (R5o): 503
// with the page (HTML or one line) that says which instance, when, and
// that nothing will wake it. nil: none was.
func (s *upstreamSource) removedPage(r *http.Request, route catalog.Route, host string) []*reverseproxy.Upstream {
	gone, ok := s.conn.Catalog().RemovedSleeper(route, host)
	if !ok {
		return nil
	}
	u := s.page(r, s.logger, pages.Data{Kind: pages.KindRemoved, Host: r.Host,
		Message: pages.RemovedMessage(gone.Name, gone.ID, gone.RemovedAt)})
	if u == nil {
		return nil
	}
	return []*reverseproxy.Upstream{u}
}

// holdFor is how long to hold r for a wake: up to wake_page_after for a
// browser's request (page set), else wake_timeout.
func (s *upstreamSource) holdFor(r *http.Request) (hold time.Duration, page bool) {
	if s.pageAfter > 0 && s.pageAfter < s.wakeTimeout && pages.AcceptsHTML(r.Header) {
		return s.pageAfter, true
	}
	return s.wakeTimeout, false
}

// wakePage answers a browser's request that a wake did not serve within
// wake_page_after (R5h): the page that reloads while an instance of the
// route is being woken, else the unavailable page with the Retry-After.
func (s *upstreamSource) wakePage(r *http.Request, host string, retry time.Duration) *reverseproxy.Upstream {
	d := pages.Data{Kind: pages.KindUnavailable, Host: r.Host, RetryAfter: pages.RetrySeconds(retry),
		Message: "The service could not be started."}
	snap := s.conn.Catalog().Snapshot()
	for _, wc := range snap.WakeCandidates(nil, s.route, host) {
		if _, _, waking := s.conn.WakeBackoff(wc.ID); waking {
			d = pages.Data{Kind: pages.KindWaking, Host: r.Host, Refresh: wakePageRefresh, RetryAfter: wakePageRefresh}
			break
		}
	}
	if d.Kind == pages.KindUnavailable {
		d.Refresh = d.RetryAfter
	}
	return s.page(r, s.logger, d)
}
