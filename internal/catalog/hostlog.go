package catalog

import "go.uber.org/zap"

// maxLoggedLabel bounds the label text a log line quotes: a tenant's label
// may be long.
const maxLoggedLabel = 256

// logHostsChange says, when an instance known before (old) has its
// caddy.host label added, changed or removed (a Swarm service's
// `--label-rm caddy.host`, say), which hosts it now serves (R2, R6b):
// nothing else in the log shows a running instance taken off a host.
func logHostsChange(log func(string, ...zap.Field), old, e *entry) {
	if old == nil || e == nil {
		return
	}
	was, wasSet := old.inst.Labels[LabelHost]
	now, isSet := e.inst.Labels[LabelHost]
	if was == now && wasSet == isSet {
		return
	}
	name := zap.String("instance", e.inst.Name)
	switch {
	case !isSet:
		log("instance no longer lists hosts: its caddy.host label was removed (it serves any host on a selector route, none on a route by host)",
			name, zap.String("was", ClipLabel(was)))
	case !wasSet:
		log("instance lists hosts now: caddy.host label added", name, zap.String("caddy.host", ClipLabel(now)))
	default:
		log("instance's hosts change: caddy.host label changed", name,
			zap.String("was", ClipLabel(was)), zap.String("caddy.host", ClipLabel(now)))
	}
}
