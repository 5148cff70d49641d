package foreignlabels

import (
	"strings"
)

// Protection returns a refusal naming the first label, in key order, of
// caddy-docker-proxy or Traefik that protects the site, whether or not
// the `labels` setting reads that set (R2f), nil when there is none:
//
//   - caddy-docker-proxy (`caddy`, `caddy_N` sites): a directive or
//     subdirective basic_auth, basicauth, forward_auth, client_auth (the
//     tls directive's) or import (a snippet may hold one), at any depth,
//     with or without its ordering prefix or isolating suffix; a matcher
//     `@name` testing remote_ip or client_ip (in its key or its value);
//   - Traefik (`traefik.*`, any case, as Traefik reads its keys): a
//     router's middlewares or tls.options, or a rule with ClientIP.
//
// The container's own caddy-dicer labels (catalog.KnownLabels) are none of
// these. It is called when labels change (an event, a listing), never per
// request; the work is linear in the labels' bytes, with no allocation.
func Protection(labels map[string]string) *Refusal {
	var at string
	var r *Refusal
	for k, v := range labels {
		if r != nil && k >= at {
			continue
		}
		if p := protectionOf(k, v); p != nil {
			at, r = k, p
		}
	}
	return r
}

// protectionOf is Protection for one label.
func protectionOf(k, v string) *Refusal {
	root, rest, _ := strings.Cut(k, ".")
	switch {
	case root == "caddy" || strings.HasPrefix(root, "caddy_") && allDigits(root[len("caddy_"):]):
		if rest == "" || !isCDPKey(k) {
			return nil
		}
		return cdpProtection(k, rest, v)
	case strings.EqualFold(root, "traefik"):
		return traefikProtection(k, rest, v)
	}
	return nil
}

// cdpProtection reads the segments (rest) of a caddy-docker-proxy key.
func cdpProtection(k, rest, v string) *Refusal {
	for rest != "" {
		var seg string
		seg, rest, _ = strings.Cut(rest, ".")
		name := protectionName(seg)
		switch {
		case strings.HasPrefix(name, "@"):
			if containsFold(v, "remote_ip") || containsFold(v, "client_ip") {
				return protectionRefusal(NameCaddyDockerProxy, k, "a matcher on the client's address")
			}
		case strings.EqualFold(name, "remote_ip"), strings.EqualFold(name, "client_ip"):
			return protectionRefusal(NameCaddyDockerProxy, k, "a matcher on the client's address")
		case strings.EqualFold(name, "basic_auth"), strings.EqualFold(name, "basicauth"),
			strings.EqualFold(name, "forward_auth"), strings.EqualFold(name, "client_auth"):
			return protectionRefusal(NameCaddyDockerProxy, k, strings.ToLower(name))
		case strings.EqualFold(name, "import"):
			return protectionRefusal(NameCaddyDockerProxy, k, "an imported snippet")
		}
	}
	return nil
}

// protectionName is a segment's directive name as caddy-docker-proxy
// reads it (^(?:(\d+)_)?(.*?)(?:_(\d+))?$: an ordering prefix and an
// isolating suffix of any number of digits) and as the Caddyfile's lexer
// then tokenizes it (no surrounding blanks). directiveName bounds the
// digits at 4 for the routes caddy-dicer reads; a protection is refused
// however many there are (R2f).
func protectionName(seg string) string {
	if i := strings.IndexByte(seg, '_'); i > 0 && allDigits(seg[:i]) {
		seg = seg[i+1:]
	}
	if i := strings.LastIndexByte(seg, '_'); i >= 0 && allDigits(seg[i+1:]) {
		seg = seg[:i]
	}
	return strings.TrimSpace(seg)
}

// traefikProtection reads the segments (rest) of a Traefik key:
// <protocol>.routers.<name>.middlewares, ...tls.options, ...rule.
func traefikProtection(k, rest, v string) *Refusal {
	_, rest, _ = strings.Cut(rest, ".") // http, tcp, udp
	kind, rest, _ := strings.Cut(rest, ".")
	if !strings.EqualFold(kind, "routers") {
		return nil
	}
	_, rest, _ = strings.Cut(rest, ".") // the router's name
	field, rest, _ := strings.Cut(rest, ".")
	switch {
	case strings.EqualFold(field, "middlewares"):
		return protectionRefusal(NameTraefik, k, "middlewares")
	case strings.EqualFold(field, "tls") && strings.EqualFold(rest, "options"):
		return protectionRefusal(NameTraefik, k, "TLS options (client certificates)")
	case strings.EqualFold(field, "rule") && rest == "" && containsFold(v, "clientip"):
		return protectionRefusal(NameTraefik, k, "a ClientIP rule")
	}
	return nil
}

// protectionRefusal says that key protects the site with what; its value
// is never shown (credentials).
func protectionRefusal(from, key, what string) *Refusal {
	return &Refusal{From: from, Label: key,
		Why: "protects the site with " + what + ", which caddy-dicer does not do from labels: the container is not " +
			"routed rather than routed with it skipped; write the protection in the site's Caddyfile and remove the " +
			"label, or add " + NameSkipProtections + " to the source's labels setting"}
}

// allDigits reports a non-empty string of ASCII digits.
func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// containsFold reports whether s contains sub (ASCII lower case) in any
// case, without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}
