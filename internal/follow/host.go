package follow

import (
	"net/netip"
	"strings"
)

// RemoteHost returns host (a name or an IP address, without a port) unless
// it names this machine: a loopback or unspecified address, "localhost" or
// a name under it; then "". R4 reaches ports published on every host
// address at a daemon's TCP host, but never at a loopback one.
func RemoteHost(host string) string {
	if host == "" {
		return ""
	}
	if h := strings.TrimSuffix(strings.ToLower(host), "."); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return ""
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsUnspecified() {
			return ""
		}
	}
	return host
}
