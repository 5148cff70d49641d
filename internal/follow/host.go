package follow

import (
	"net"
	"net/netip"
	"strings"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
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

// maxHostName is the longest DNS name (RFC 1035).
const maxHostName = 253

// CheckPublishedPortHost checks the published_port_host setting (R4): ""
// (not set), an IP address, or a DNS name, without a scheme, a port or a
// path. "localhost" and names under it are refused (R4: a dial address is
// never localhost), and so is an unspecified address (0.0.0.0 names no
// host); a loopback IP literal is allowed as the operator's explicit
// choice: the Docker Engine forwards published ports from it, so a Caddy
// on the Engine's host may use 127.0.0.1 (Dicer does not, and a Caddy in a
// container would reach itself: don't there). Each error starts with
// "published_port_host: ".
func CheckPublishedPortHost(host string) error {
	if host == "" {
		return nil
	}
	fail := func(why string) error {
		return setting.Errorf("published_port_host", "%q %s", host, why)
	}
	if strings.Contains(host, "://") {
		return fail("is a URL: give only a host name or an IP address (no scheme)")
	}
	if strings.HasPrefix(host, "[") {
		return fail("is bracketed: give an IPv6 address without brackets, and no port")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return fail("has a zone: give an address routable without one")
		}
		if ip.Unmap().IsUnspecified() {
			return fail("is the unspecified address, which names no host: give the address at which Caddy reaches published ports, or leave it unset to use the network's gateway")
		}
		return nil // a loopback literal is the operator's explicit choice (a Caddy on the Docker host)
	}
	if _, _, err := net.SplitHostPort(host); err == nil {
		return fail("has a port: give only a host name or an IP address (the published port is the instance's)")
	}
	if strings.ContainsAny(host, "/?#@") {
		return fail("is not a host name: give only a host name or an IP address")
	}
	if !isDNSName(host) {
		return fail("is neither an IP address nor a DNS name")
	}
	if RemoteHost(host) == "" {
		return fail("names this machine: a dial address is never localhost (R4), whose IPv4 or IPv6 answer varies; give an IP address (127.0.0.1 if Caddy runs on the host and the daemon forwards from it), or leave it unset to use the network's gateway")
	}
	return nil
}

// isDNSName reports whether name is a DNS name: labels of 1 to 63 letters,
// digits, '-' (not first nor last) and '_', 253 bytes at most, one
// trailing dot allowed, the last not all digits.
func isDNSName(name string) bool {
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > maxHostName {
		return false
	}
	labels := strings.Split(name, ".")
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return false // all digits: a mistyped IP address, not a name
	}
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// DialableHostIP reports whether a port published on hostIP, as a daemon
// reports it, may be dialled there (R4b): "" (every host address), or an
// IP address that is neither link-local (169.254.0.0/16, fe80::/10, where
// cloud metadata services answer), nor multicast, nor the broadcast
// 255.255.255.255. Loopback passes: R4 itself sends those requests to the
// instance's own address. Anything else (a name) does not: a daemon
// reports addresses.
func DialableHostIP(hostIP string) bool {
	if hostIP == "" {
		return true
	}
	ip, err := netip.ParseAddr(hostIP)
	if err != nil || ip.Zone() != "" {
		return false
	}
	ip = ip.Unmap()
	return !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() && !ip.IsMulticast() &&
		!ip.IsInterfaceLocalMulticast() && ip != netip.AddrFrom4([4]byte{255, 255, 255, 255})
}
