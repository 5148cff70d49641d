package caddydicer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
)

// queueSource is a route on port 8080 over instances a (labelled
// caddy.max_requests=1) and, with unlimited, b (no limit), with a queue of
// size 1 and its page server, as provision makes them.
func queueSource(t *testing.T, unlimited bool) *upstreamSource {
	t.Helper()
	net0 := []catalog.Attachment{{Network: "n", Address: "10.0.0.2"}}
	insts := []catalog.Instance{{ID: "a", Name: "a", State: catalog.StateRunning, Networks: net0,
		Labels: map[string]string{"caddy.host": "h", "caddy.port": "8080", catalog.LabelMaxRequests: "1"}}}
	if unlimited {
		insts = append(insts, catalog.Instance{ID: "b", Name: "b", State: catalog.StateRunning,
			Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.3"}},
			Labels:   map[string]string{"caddy.host": "h", "caddy.port": "8080"}})
	}
	cat := catalog.New(catalog.Options{})
	cat.Replace(insts)
	s := &upstreamSource{conn: connection.Fixture{Catalog: cat}.Conn(), keepAlive: &keepAlive{}}
	s.QueueSize = 1
	if err := s.provisionPages(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanupPages)
	if err := s.provisionQueue("dicer", "test", t.Name()); err != nil {
		t.Fatal(err)
	}
	return s
}

func requestFor(ctx context.Context) *http.Request {
	return httptest.NewRequest(http.MethodGet, "http://h/", nil).WithContext(ctx)
}

// R5q, without Caddy: at caddy.max_requests=1 the second request waits
// in GetUpstreams until the first ends, then gets the instance; a third
// while it waits (queue_size 1) gets the page upstream, which answers 503
// with Retry-After; each upstream carries the instance's limit.
func TestGetUpstreams_R5q_waits_for_a_slot(t *testing.T) {
	s := queueSource(t, false)
	first, end := context.WithCancel(context.Background())
	ups, err := s.GetUpstreams(requestFor(first))
	if err != nil || len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" || ups[0].MaxRequests != 1 {
		t.Fatalf("first request: %v, %v; want a's upstream with max_requests 1", ups, err)
	}
	second := make(chan []*reverseproxy.Upstream, 1)
	go func() {
		ups, _ := s.GetUpstreams(requestFor(context.Background()))
		second <- ups
	}()
	if !testkit.Until(10*time.Second, func() bool { return s.queue.Waiting() == 1 }) {
		t.Fatal("the second request did not queue")
	}

	third := requestFor(context.Background())
	third.Header.Set("Accept", "text/plain")
	refused, err := s.GetUpstreams(third)
	if err != nil || len(refused) != 1 || refused[0].Dial == "10.0.0.2:8080" {
		t.Fatalf("third request, queue full: %v, %v; want the page upstream", refused, err)
	}
	page, _ := http.NewRequest(http.MethodGet, "http://"+refused[0].Dial+"/", nil)
	page.Header.Set(pages.Header, third.Header.Get(pages.Header))
	resp, err := http.DefaultClient.Do(page)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("the page upstream answers %d with Retry-After %q; want 503, 1", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	select {
	case ups := <-second:
		t.Fatalf("the second request got %v while the first was in flight", ups)
	default:
	}
	end()
	select {
	case ups := <-second:
		if len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" || ups[0].MaxRequests != 1 {
			t.Fatalf("second request: %v; want a's upstream", ups)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second request was not let in when the first ended")
	}
}

// R5q: a route with an instance without a limit does not queue, and its
// upstreams carry no limit.
func TestGetUpstreams_R5q_no_queue_without_a_limit_on_every_instance(t *testing.T) {
	s := queueSource(t, true)
	for range 3 {
		ups, err := s.GetUpstreams(requestFor(context.Background()))
		if err != nil || len(ups) != 2 || ups[0].MaxRequests != 0 || ups[1].MaxRequests != 0 {
			t.Fatalf("%v, %v; want both upstreams, without a limit", ups, err)
		}
	}
	if s.queue.InFlight() != 0 {
		t.Fatalf("%d counted in flight on a route without a limit", s.queue.InFlight())
	}
}

// R5q, tenants sharing a route (review s48): a route routed by
// caddy.host serves many hosts; the limit is each instance's, so a
// request to host g, whose instance c is idle, is let in at once while
// host h's instance a is at its limit. (Open finding: the queue counts
// the route's requests in flight over all its hosts, so one host's slow
// or flooded instance makes every other host of the route wait and,
// past queue_size, answers them 503.)
func TestGetUpstreams_R5q_a_host_at_its_limit_does_not_hold_another_host(t *testing.T) {
	cat := catalog.New(catalog.Options{})
	cat.Replace([]catalog.Instance{
		{ID: "a", Name: "a", State: catalog.StateRunning, Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.2"}},
			Labels: map[string]string{"caddy.host": "h", "caddy.port": "8080", catalog.LabelMaxRequests: "1"}},
		{ID: "c", Name: "c", State: catalog.StateRunning, Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.4"}},
			Labels: map[string]string{"caddy.host": "g", "caddy.port": "8080", catalog.LabelMaxRequests: "1"}},
	})
	s := &upstreamSource{conn: connection.Fixture{Catalog: cat}.Conn(), keepAlive: &keepAlive{}}
	if err := s.provisionPages(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.cleanupPages)
	if err := s.provisionQueue("dicer", "test", t.Name()); err != nil {
		t.Fatal(err)
	}
	held, end := context.WithCancel(context.Background())
	defer end()
	if ups, err := s.GetUpstreams(requestFor(held)); err != nil || len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" {
		t.Fatalf("h's request: %v, %v; want a's upstream", ups, err)
	}
	other, leave := context.WithCancel(context.Background())
	defer leave()
	got := make(chan []*reverseproxy.Upstream, 1)
	go func() {
		ups, _ := s.GetUpstreams(httptest.NewRequest(http.MethodGet, "http://g/", nil).WithContext(other))
		got <- ups
	}()
	var ups []*reverseproxy.Upstream
	if !testkit.Until(10*time.Second, func() bool {
		select {
		case ups = <-got:
			return true
		default:
			return s.queue.Waiting() > 0
		}
	}) || ups == nil {
		t.Fatalf("g's request waits (%d waiting) while only h's instance is at its limit", s.queue.Waiting())
	}
	if len(ups) != 1 || ups[0].Dial != "10.0.0.4:8080" {
		t.Fatalf("g's request: %v; want c's upstream", ups)
	}
}
