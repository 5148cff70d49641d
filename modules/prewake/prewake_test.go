package prewake

import (
	"errors"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// R5n, R10: a bad setting of dicer_prewake is an error that names it.
func TestPreWakeCaddyfile_R5n_bad_settings_name_themselves(t *testing.T) {
	for input, want := range map[string]string{
		"dicer_prewake {\n client_wakes 0\n}":     "client_wakes",
		"dicer_prewake {\n client_wakes many\n}":  "client_wakes",
		"dicer_prewake {\n client_window -1s\n}":  "client_window",
		"dicer_prewake {\n client_window soon\n}": "client_window",
	} {
		var p PreWake
		err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		var se *setting.Error
		if !errors.As(err, &se) || se.Setting != want {
			t.Errorf("%q: %v, want an error about %s", input, err, want)
		}
	}
	var p PreWake
	if err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser("dicer_prewake {\n wakes 3\n}")); err == nil {
		t.Error("an unknown setting was taken")
	}
	if err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser("dicer_prewake {\n client_wakes 3\n client_window 10s\n}")); err != nil || p.ClientWakes != 3 {
		t.Errorf("%v, %+v", err, p)
	}
}
