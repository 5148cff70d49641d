package foreignlabels_test

import (
	"testing"

	fl "github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
)

// A Compose container's labels, with caddy-dicer's own, caddy-docker-proxy's
// or Traefik's routing: what Apply costs per container per re-listing.
var benchLabels = map[string]map[string]string{
	"own": {"com.docker.compose.project": "shop", "com.docker.compose.service": "web", "com.docker.compose.version": "2.29.1",
		"com.docker.compose.config-hash": "5f1c", "caddy.host": "shop.example.com", "caddy.port": "8080"},
	"cdp": {"com.docker.compose.project": "shop", "com.docker.compose.service": "web", "com.docker.compose.version": "2.29.1",
		"com.docker.compose.config-hash": "5f1c", "caddy": "shop.example.com", "caddy.handle_path": "/api/*",
		"caddy.handle_path.0_reverse_proxy": "{{upstreams 8080}}"},
	"traefik": {"com.docker.compose.project": "shop", "com.docker.compose.service": "web", "com.docker.compose.version": "2.29.1",
		"com.docker.compose.config-hash": "5f1c", "traefik.enable": "true",
		"traefik.http.routers.web.rule":                      "Host(`shop.example.com`) && PathPrefix(`/api`)",
		"traefik.http.services.web.loadbalancer.server.port": "8080"},
}

func BenchmarkApply(b *testing.B) {
	all := fl.SetCaddyDicer | fl.SetCaddyDockerProxy | fl.SetTraefik
	for _, name := range []string{"own", "cdp", "traefik"} {
		for _, sets := range []struct {
			name string
			s    fl.Set
		}{{"default", fl.SetCaddyDicer}, {"all", all}} {
			b.Run(name+"/"+sets.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					fl.Apply(sets.s, benchLabels[name])
				}
			})
		}
	}
}
