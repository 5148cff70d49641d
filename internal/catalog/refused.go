package catalog

import (
	"strings"

	"go.uber.org/zap"
)

// warnRefused warns once per instance whose foreign labels were refused
// (R2f, LabelRefused): when it appears so, and again only when the
// refusal changes. The value is the adapter's, tenant text in it quoted
// and clipped (foreignlabels.Refusal.String); it is clipped again here.
func (c *Catalog) warnRefused(old, e *entry) {
	why, ok := e.inst.Labels[LabelRefused]
	if !ok || old != nil && old.inst.Labels[LabelRefused] == why {
		return
	}
	c.logger.Warn("instance not routed: its labels ask for what a dynamic source cannot do (R2f)",
		zap.String("instance", e.inst.Name), zap.String("refused", clipRefusal(why)))
	if set := refusedSet(why); set != "" && c.refused != nil {
		c.refused(set)
	}
}

// refusedSet is the label set a refusal names first ("caddy-docker-proxy
// label ...", foreignlabels.Refusal.String), "" for any other value (one
// a Dicer instance set itself): a metric's label from a bounded set.
func refusedSet(why string) string {
	for _, set := range []string{"caddy-docker-proxy", "traefik"} {
		if strings.HasPrefix(why, set+" label ") {
			return set
		}
	}
	return ""
}

// clipRefusal bounds a refusal in a log line: Apply's are shorter; one a
// Dicer instance set itself is not.
func clipRefusal(why string) string {
	if len(why) <= 1024 {
		return why
	}
	return strings.ToValidUTF8(why[:1024], "") + "..."
}
