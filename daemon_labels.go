package caddydicer

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/foreignlabels"
	"github.com/caddy-dicer/caddy-dicer/internal/setting"
	"github.com/caddy-dicer/caddy-dicer/selector"
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

// FollowEnv is the environment variable the `follow` setting of a Docker
// or Swarm module defaults to when it is set and not empty (R2g), as
// caddy-docker-proxy's CADDY_DOCKER_* variables are read.
const FollowEnv = "CADDY_DICER_FOLLOW"

// followSelector reads the `follow` setting of a Docker or Swarm module
// (R2g): the selector a container's (a service's) own labels must match
// for the connection to see it at all. value is the setting; empty, the
// environment's FollowEnv as getenv reads it (at provision); empty too,
// every container. A bad one is an error naming follow (and the variable,
// when it came from there).
func followSelector(value string, getenv func(string) string) (selector.Selector, error) {
	from := ""
	if strings.TrimSpace(value) == "" && getenv != nil {
		value, from = getenv(FollowEnv), " (from $"+FollowEnv+")"
	}
	if strings.Contains(value, "{") {
		// No placeholder is replaced here: `{env.X}` would be a valid
		// selector that matches no container, a Caddy following nothing.
		return selector.Selector{}, setting.Errorf("follow", "%q holds a placeholder, which follow does not replace (in a Caddyfile write {$VAR}, or set $%s)%s",
			value, FollowEnv, from)
	}
	sel, err := selector.Parse(value)
	if err != nil {
		return selector.Selector{}, setting.Errorf("follow", "%v%s", err, from)
	}
	return sel, nil
}

// unmarshalFollow reads `follow <selector>` at the dispenser: the words
// after it are one selector, spaces kept (`follow tier in (a, b)`).
func unmarshalFollow(disp *caddyfile.Dispenser, into *string) error {
	words := disp.RemainingArgs()
	if len(words) == 0 {
		return settingErrf(disp, "follow", "names no selector (e.g. follow env=prod)")
	}
	value := strings.Join(words, " ")
	if _, err := followSelector(value, nil); err != nil {
		return disp.WrapErr(err)
	}
	*into = value
	return nil
}
