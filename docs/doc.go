// Package docs is the user documentation (the Markdown pages of this
// folder) and, in its tests, the checks that keep it true: every page
// linked from the index, every Caddyfile snippet adapted by a Caddy with
// the plugin's modules, every rule cited defined with its tests, every
// registered module in the README's table, CONTRIBUTING.md's layout
// naming every package. They run from the repository's root (TestMain
// moves there), apart from the Caddy modules they check.
package docs
