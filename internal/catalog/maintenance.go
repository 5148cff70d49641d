package catalog

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/caddy-dicer/caddy-dicer/selector"
)

// Maintenance (R5i): an instance labelled caddy.maintenance, or matched by
// a selector an operator put in maintenance (the admin API), gets no
// request and is never woken; a route whose candidates for a host are all
// out answers with the maintenance page instead.

// MaxMaintenanceMessage bounds a maintenance message, from a label or the
// admin API, in bytes: a longer one is cut (never half a character).
const MaxMaintenanceMessage = 512

// MaxMaintenanceSelectors bounds the selectors in maintenance at once per
// catalog (the admin API refuses one more).
const MaxMaintenanceSelectors = 256

// DefaultMaintenanceMessage is said when the label or the switch gives none.
const DefaultMaintenanceMessage = "This site is down for maintenance."

// maintenanceRule is a selector in maintenance, with its message.
type maintenanceRule struct {
	sel     selector.Selector
	message string
}

// maintenanceOf is the message of the instance's own label, if it has one
// (ok false: none).
func maintenanceOf(labels map[string]string) (message string, ok bool) {
	raw, ok := labels[LabelMaintenance]
	if !ok {
		return "", false
	}
	return MaintenanceMessage(raw), true
}

// MaintenanceMessage is raw trimmed and cut to MaxMaintenanceMessage bytes,
// or DefaultMaintenanceMessage when empty.
func MaintenanceMessage(raw string) string {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return DefaultMaintenanceMessage
	}
	if len(raw) > MaxMaintenanceMessage {
		cut := MaxMaintenanceMessage
		for cut > 0 && !utf8.RuneStart(raw[cut]) {
			cut--
		}
		raw = raw[:cut]
	}
	return strings.ToValidUTF8(raw, "")
}

// markMaintenance sets e's maintenance from its label, else from the
// first rule (by selector text) that matches it. c.mu is held.
func (c *Catalog) markMaintenance(e *entry) {
	msg, maint := maintenanceOf(e.inst.Labels)
	for _, k := range c.maintenanceKeys {
		if maint {
			break
		}
		if r := c.maintenance[k]; r.sel.Matches(e.inst.Labels) {
			maint, msg = true, r.message
		}
	}
	e.maint = maint
	if e.note().maintMsg != msg {
		e.setNotes(func(n *entryNotes) { n.maintMsg = msg })
	}
}

// SetMaintenance puts the instances sel matches in maintenance with
// message (on), or takes sel's switch off (on false; an instance's own
// label stays). It returns the number of instances whose maintenance
// changed, and false when on would exceed MaxMaintenanceSelectors.
func (c *Catalog) SetMaintenance(sel selector.Selector, message string, on bool) (changed int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := sel.String()
	if on {
		if _, exists := c.maintenance[key]; !exists && len(c.maintenance) >= MaxMaintenanceSelectors {
			return 0, false
		}
		if c.maintenance == nil {
			c.maintenance = map[string]maintenanceRule{}
		}
		if _, exists := c.maintenance[key]; !exists {
			c.maintenanceKeys = append(c.maintenanceKeys, key)
			slices.Sort(c.maintenanceKeys)
		}
		c.maintenance[key] = maintenanceRule{sel: sel, message: MaintenanceMessage(message)}
	} else {
		delete(c.maintenance, key)
		c.maintenanceKeys = slices.DeleteFunc(c.maintenanceKeys, func(k string) bool { return k == key })
	}
	for _, old := range c.byID {
		e := *old
		c.markMaintenance(&e)
		if e.maint == old.maint && e.note().maintMsg == old.note().maintMsg {
			continue
		}
		changed++
		c.byID[e.inst.ID] = &e
		c.publish(c.current.Load(), old, &e)
		c.logChange(old, &e, "")
	}
	return changed, true
}

// MaintenanceSwitch is a selector an operator put in maintenance.
type MaintenanceSwitch struct {
	Selector string
	Message  string
}

// MaintenanceSwitches lists the selectors in maintenance, in order.
func (c *Catalog) MaintenanceSwitches() []MaintenanceSwitch {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]MaintenanceSwitch, 0, len(c.maintenanceKeys))
	for _, k := range c.maintenanceKeys {
		out = append(out, MaintenanceSwitch{Selector: k, Message: c.maintenance[k].message})
	}
	return out
}

// Maintenance reports whether a request for host on route that found no
// target meets an instance in maintenance, and its message: the first, in
// name order, of the route's candidates serving host. Only a request with
// no target calls it.
func (s *Snapshot) Maintenance(route Route, host string) (message string, ok bool) {
	candidates, exact := s.candidates(route, host, false)
	for _, e := range candidates {
		if e.maint && e.servesHost(host, exact) {
			return e.note().maintMsg, true
		}
	}
	return "", false
}

// ReplaceMaintenance makes want the selectors in maintenance, with their
// messages (a fleet's switches, R4e): the others' switches go off. It
// returns the number of instances whose maintenance changed. A selector
// that does not parse, or one past MaxMaintenanceSelectors, is skipped.
func (c *Catalog) ReplaceMaintenance(want []MaintenanceSwitch) (changed int) {
	keep := map[string]bool{}
	for _, w := range want {
		sel, err := selector.Parse(w.Selector)
		if err != nil {
			continue
		}
		keep[sel.String()] = true
		c.mu.Lock()
		rule, exists := c.maintenance[sel.String()]
		c.mu.Unlock()
		if exists && rule.message == MaintenanceMessage(w.Message) {
			continue
		}
		n, _ := c.SetMaintenance(sel, w.Message, true)
		changed += n
	}
	for _, have := range c.MaintenanceSwitches() {
		if keep[have.Selector] {
			continue
		}
		if sel, err := selector.Parse(have.Selector); err == nil {
			n, _ := c.SetMaintenance(sel, "", false)
			changed += n
		}
	}
	return changed
}
