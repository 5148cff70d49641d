package caddydicer

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
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

// settingTokens walks again the segment d holds, a module's, and returns
// the token that names each setting of its block; the shorthand's
// arguments count as selector and port, and "" is the module's name. It is
// for errors that are found once the whole block is read, so it leaves d
// at the end of the segment.
func settingTokens(d *caddyfile.Dispenser) map[string]caddyfile.Token {
	at := map[string]caddyfile.Token{}
	d.Reset()
	if !d.Next() {
		return at
	}
	at[""] = d.Token()
	for i, tok := range d.RemainingArgsAsTokens() {
		if i < 2 {
			at[[]string{"selector", "port"}[i]] = tok
		}
	}
	last := d.Token()
	for d.NextBlock(0) {
		tok := d.Token()
		if d.Nesting() == 1 && (tok.Line != last.Line || tok.File != last.File) {
			at[tok.Text] = tok // the first token of a line in the block
		}
		last = tok
	}
	return at
}

// settingErrf is d.Errf for an error about setting name: a SettingError,
// at the dispenser's line.
func settingErrf(d *caddyfile.Dispenser, name, format string, args ...any) error {
	return d.WrapErr(setting.Errorf(name, format, args...))
}

// errAt returns err with the file and line of tok, as d.Errf would at it.
func errAt(tok caddyfile.Token, err error) error {
	d := caddyfile.NewDispenser([]caddyfile.Token{tok})
	d.Next()
	return d.WrapErr(err)
}

// blame points err, an error of validateStatic found once the whole block
// is read, at the line of the setting it names (a SettingError): the
// latest in the block of its Setting and Also, a setting in a nested block
// ("tls ca") at the block's line; else, or when none of them is in the
// block, at the module's name. The error's text is never read, so
// rewording it never moves the line a user is shown. So a token refused
// with a unix address points at whichever of the two comes last, and a
// TCP address without a token at the address.
func blame(d *caddyfile.Dispenser, err error) error {
	at := settingTokens(d)
	tok, found := at[""]
	var se *SettingError
	if errors.As(err, &se) {
		blamed := false
		for _, name := range append([]string{se.Setting}, se.Also...) {
			name, _, _ = strings.Cut(name, " ")
			if t, ok := at[name]; ok && (!blamed || t.Line > tok.Line) {
				tok, blamed = t, true
			}
		}
	}
	if !found {
		return d.WrapErr(err)
	}
	return errAt(tok, err)
}
