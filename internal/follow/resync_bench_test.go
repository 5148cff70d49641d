package follow

import (
	"fmt"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// nopSink takes what it is given and keeps nothing.
type nopSink struct{}

func (nopSink) Replace([]catalog.Instance) {}
func (nopSink) Put(catalog.Instance)       {}
func (nopSink) Delete(string)              {}
func (nopSink) Stopping(string)            {}
func (nopSink) Started(string)             {}

// BenchmarkResyncDiff is the session's side of one periodic re-listing
// (R6c) of n instances none of which changed: what it costs Caddy every
// Resync, besides the daemon's one list call.
func BenchmarkResyncDiff(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			list := make([]catalog.Instance, n)
			for i := range list {
				list[i] = catalog.Instance{ID: fmt.Sprintf("id-%06d", i), Name: fmt.Sprintf("c-%d", i), State: catalog.StateRunning,
					Labels:   map[string]string{"caddy.host": fmt.Sprintf("h%d.example.com", i), "caddy.port": "8080", "app": "web"},
					Networks: []catalog.Attachment{{Network: "bridge", Address: "172.17.0.2", Gateway: "172.17.0.1"}}}
			}
			s := &session{loop: &Loop{}, sink: nopSink{}, known: map[string]catalog.Instance{}}
			s.applyListing(list)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if changed, gone := s.applyListing(list); changed+gone != 0 {
					b.Fatal("changes found")
				}
			}
		})
	}
}
