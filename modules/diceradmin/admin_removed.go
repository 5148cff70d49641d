package diceradmin

import (
	"net/http"
	"time"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/pages"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// RemovedSleeper is, at GET /dicer/removed, an instance its daemon removed
// while it was on standby (R5o): its hosts answer 503 saying so, and
// nothing will wake it. Each is listed until a new instance claims one of
// its hosts (or takes its name), or for catalog.RemovedSleeperAge (24 h);
// at most catalog.MaxRemovedSleepers (256) per connection, oldest
// forgotten first.
type RemovedSleeper struct {
	Kind    string `json:"kind"`
	Address string `json:"address"`
	ID      string `json:"id"`
	Name    string `json:"name"`
	// Hosts are the hosts its caddy.host label claimed (none: the
	// selector routes that matched its labels).
	Hosts []string `json:"hosts"`
	Image string   `json:"image,omitempty"`
	// RemovedAt is when Caddy saw it removed; ListedUntil when it is
	// forgotten unless claimed before.
	RemovedAt   time.Time `json:"removed_at"`
	ListedUntil time.Time `json:"listed_until"`
	// Message is what its hosts' 503 says.
	Message string `json:"message"`
}

// removed answers GET /dicer/removed: the instances removed while on
// standby, per connection, oldest first.
func (adminDicer) removed(w http.ResponseWriter, _ *http.Request) error {
	out := []RemovedSleeper{}
	for _, c := range dicerapp.Connections() {
		for _, r := range c.Catalog().RemovedSleepers() {
			hosts := r.Hosts
			if hosts == nil {
				hosts = []string{}
			}
			out = append(out, RemovedSleeper{Kind: c.Kind(), Address: c.Address(), ID: r.ID, Name: r.Name,
				Hosts: hosts, Image: r.Image, RemovedAt: r.RemovedAt,
				ListedUntil: r.RemovedAt.Add(catalog.RemovedSleeperAge),
				Message:     pages.RemovedMessage(r.Name, r.ID, r.RemovedAt)})
		}
	}
	return writeJSON(w, out)
}
