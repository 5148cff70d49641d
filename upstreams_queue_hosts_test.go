package caddydicer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/testkit"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// R5q, an outsider with many Host headers (review of d2ed17c): the hosts
// a wildcard `*.w.test` serves, and the hosts a selector route serves by
// instances without caddy.host, are served by the same instances
// whatever the name, so they share one queue: while the instance
// (caddy.max_requests=1) is held by a request for one such host, requests
// for 50 other names wait in that queue, not let in past the instance's
// limit each in a queue of its own (nor 50 queues made).
func TestGetUpstreams_R5q_many_host_names_share_their_instances_queue(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		sel    string
		host   func(i int) string
	}{
		{"wildcard", map[string]string{"caddy.host": "*.w.test", "caddy.port": "8080", catalog.LabelMaxRequests: "1", "app": "w"}, "",
			func(i int) string { return fmt.Sprintf("x%d.w.test", i) }},
		{"selector", map[string]string{"caddy.port": "8080", catalog.LabelMaxRequests: "1", "app": "w"}, "app=w",
			func(i int) string { return fmt.Sprintf("name%d.test", i) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := catalog.New(catalog.Options{})
			cat.Replace([]catalog.Instance{{ID: "a", Name: "a", State: catalog.StateRunning,
				Networks: []catalog.Attachment{{Network: "n", Address: "10.0.0.2"}}, Labels: tc.labels}})
			s := &upstreamSource{conn: connection.Fixture{Catalog: cat}.Conn(), keepAlive: &keepAlive{}}
			if tc.sel != "" {
				v := cat.Watch(selector.MustParse(tc.sel))
				t.Cleanup(func() { cat.Unwatch(v) })
				s.route.View = v
			}
			if err := s.provisionPages(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.cleanupPages)
			if err := s.provisionQueue("dicer", "test", t.Name()); err != nil {
				t.Fatal(err)
			}
			get := func(ctx context.Context, host string) []*reverseproxy.Upstream {
				ups, _ := s.GetUpstreams(httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil).WithContext(ctx))
				return ups
			}
			held, end := context.WithCancel(context.Background())
			defer end()
			if ups := get(held, tc.host(0)); len(ups) != 1 || ups[0].Dial != "10.0.0.2:8080" {
				t.Fatalf("the first request: %v; want a's upstream", ups)
			}
			const n = 50
			ctx, leave := context.WithCancel(context.Background())
			defer leave()
			letIn := make(chan string, n)
			for i := 1; i <= n; i++ {
				go func() {
					if ups := get(ctx, tc.host(i)); len(ups) == 1 && ups[0].Dial == "10.0.0.2:8080" && ctx.Err() == nil {
						letIn <- tc.host(i)
					}
				}()
			}
			if !testkit.Until(10*time.Second, func() bool { return s.queue.Waiting() == n || len(letIn) > 0 }) {
				t.Fatalf("%d of %d wait", s.queue.Waiting(), n)
			}
			if len(letIn) > 0 {
				t.Fatalf("a request for %s was let in while a's one slot is held: another name, another queue, past the instance's limit", <-letIn)
			}
			s.queue.mu.Lock()
			queues := len(s.queue.m)
			s.queue.mu.Unlock()
			if queues != 1 {
				t.Errorf("%d queues for %d names served by one instance, want 1", queues, n+1)
			}
			end() // the slot is handed to the first in line
			select {
			case <-letIn:
			case <-time.After(10 * time.Second):
				t.Fatal("nobody let in once the slot was free")
			}
		})
	}
}
