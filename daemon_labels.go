package caddydicer

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// labelSets reads the `labels` setting of a Docker or Swarm module (R2f):
// the label sets its containers or services are routed by.
func labelSets(words []string) (foreignlabels.Set, error) {
	s, err := foreignlabels.ParseSets(words)
	if err != nil {
		return 0, setting.Errorf("labels", "%v", err)
	}
	return s, nil
}

// unmarshalLabels reads `labels <set>...` at the dispenser.
func unmarshalLabels(disp *caddyfile.Dispenser, into *[]string) error {
	words := disp.RemainingArgs()
	if len(words) == 0 {
		return settingErrf(disp, "labels", "names no label set (caddy-dicer, caddy-docker-proxy, traefik)")
	}
	if _, err := foreignlabels.ParseSets(words); err != nil {
		return settingErrf(disp, "labels", "%v", err)
	}
	*into = words
	return nil
}
