package caddydicer

import (
	"maps"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// settingAt returns the name of the setting the dispenser is at, if it is
// one of names, and records it in seen; a setting given twice is an error.
func settingAt(d *caddyfile.Dispenser, seen map[string]bool, names ...string) (name string, ok bool, err error) {
	name = d.Val()
	if !slices.Contains(names, name) {
		return "", false, nil
	}
	if seen[name] {
		return name, true, d.Errf("%s has already been specified", name)
	}
	seen[name] = true
	return name, true, nil
}

// oneValue reads the single value of the setting the dispenser is at.
func oneValue(d *caddyfile.Dispenser, value *string) error {
	if !d.AllArgs(value) {
		return d.ArgErr()
	}
	return nil
}

// unmarshalBlock parses a block of settings that take one value each, such
// as `tls { ca <file> }`, into the strings named by fields.
func unmarshalBlock(d *caddyfile.Dispenser, block string, fields map[string]*string) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		value, ok := fields[name]
		if !ok {
			names := slices.Sorted(maps.Keys(fields))
			return d.Errf("unrecognized %s setting '%s' (want %s)", block, name, strings.Join(names, ", "))
		}
		if seen[name] {
			return d.Errf("%s %s has already been specified", block, name)
		}
		seen[name] = true
		if !d.AllArgs(value) {
			return d.ArgErr()
		}
	}
	return nil
}
