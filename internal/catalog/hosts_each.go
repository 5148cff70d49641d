package catalog

// EachHost calls fn with each host some instance lists exactly in its
// caddy.host label (never a wildcard pattern), in no particular order,
// until fn returns false. It walks the whole index: O(hosts), for a
// reader that wants them all (obtain_on_claim, R7b), not for a request.
func (s *Snapshot) EachHost(fn func(host string) bool) {
	it := s.hosts.Iterator()
	for !it.Done() {
		host, entries, ok := it.Next()
		if !ok {
			return
		}
		if len(entries) > 0 && !fn(host) {
			return
		}
	}
}

// EachClaimedHost is EachHost with the name of an instance that claims
// each host (the first the index holds for it), for a reader that shares
// work fairly among the claiming instances (obtain_on_claim, R7b).
func (s *Snapshot) EachClaimedHost(fn func(host, claimant string) bool) {
	it := s.hosts.Iterator()
	for !it.Done() {
		host, entries, ok := it.Next()
		if !ok {
			return
		}
		if len(entries) > 0 && !fn(host, entries[0].inst.Name) {
			return
		}
	}
}

// EachHostClaimants is EachHost with the names of every instance that
// claims each host, in the index's order (by name after a full listing),
// for a reader that charges a host to whichever of its claimants has room
// under a per-instance cap (dns_records' max_records_per_instance, R7e):
// another instance listing a host beside its own hosts cannot spend the
// host's place. claimants is valid only during the call.
func (s *Snapshot) EachHostClaimants(fn func(host string, claimants []string) bool) {
	var names []string
	it := s.hosts.Iterator()
	for !it.Done() {
		host, entries, ok := it.Next()
		if !ok {
			return
		}
		if len(entries) == 0 {
			continue
		}
		names = names[:0]
		for _, e := range entries {
			names = append(names, e.inst.Name)
		}
		if !fn(host, names) {
			return
		}
	}
}

// ClaimantsOf appends to dst the names of every instance that claims host
// by name (index order), else of every one whose wildcard matches it: the
// instances a name's issuance budget may be charged to (R7d), so that one
// listing another's name cannot spend the budget it is charged to.
func (s *Snapshot) ClaimantsOf(dst []string, host string) []string {
	entries, ok := s.hosts.Get(host)
	if !ok || len(entries) == 0 {
		entries = s.byWildcard(host)
	}
	for _, e := range entries {
		dst = append(dst, e.inst.Name)
	}
	return dst
}

// RoutedHosts are the hosts the catalog routes an instance with these
// labels for (R2), read from its caddy.host as every route reads it:
// each exact name normalized (case, a trailing dot), and "*.<domain>" for
// each wildcard (R2a: its claimants share the hosts no one lists by
// name); none when the label is over the caps (R2c) or lists no valid
// name. listed is false when it has no caddy.host: routed by selector,
// for any host.
func RoutedHosts(labels map[string]string) (hosts []string, listed bool) {
	exact, wildcards, restricted, _ := parseHosts(labels[LabelHost])
	for _, suffix := range wildcards {
		exact = append(exact, "*."+suffix)
	}
	return exact, restricted
}
