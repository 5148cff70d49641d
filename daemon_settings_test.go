package caddydicer

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestBlame_R10_line_from_fields_not_text: the Caddyfile line an error
// found once the block is read points at is chosen from the SettingError's
// fields alone. A message that mentions other settings' names, or that
// starts with one without being a SettingError, does not move it, so
// rewording a message never moves the line a user is shown.
func TestBlame_R10_line_from_fields_not_text(t *testing.T) {
	const block = "dicer {\n address 192.0.2.10:7443\n token abc\n tls {\n  ca /a.pem\n }\n port 8080\n}"
	for _, tc := range []struct {
		name string
		err  error
		line int
	}{
		{"setting_whose_text_names_later_ones", &SettingError{Setting: "address", Err: errors.New(`the token, tls and port settings "token: x"`)}, 2},
		{"untyped_text_starting_with_a_setting", errors.New("token: not allowed with the address; tls too"), 1},
		{"latest_of_setting_and_also", &SettingError{Setting: "address", Also: []string{"token"}, Err: errors.New("x")}, 3},
		{"also_before_setting", &SettingError{Setting: "tls", Also: []string{"address"}, Err: errors.New("x")}, 4},
		{"nested_setting_at_its_block", &SettingError{Setting: "tls ca", Err: errors.New("x")}, 4},
		{"setting_absent_also_present", &SettingError{Setting: "readiness_timeout", Also: []string{"port"}, Err: errors.New("x")}, 7},
		{"none_in_the_block", &SettingError{Setting: "published_port_host", Err: errors.New("address token tls port")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := caddyfile.NewTestDispenser(block)
			d.Next()
			for d.NextBlock(0) { // read the whole block, as unmarshal does
			}
			got := blame(d, tc.err)
			want := "Testfile:" + string(rune('0'+tc.line))
			if !strings.HasSuffix(got.Error(), want) {
				t.Errorf("%q: want the line %s", got, want)
			}
			var se *SettingError
			if errors.As(tc.err, &se) && !errors.As(got, &se) {
				t.Errorf("%q: the Caddyfile error lost its SettingError", got)
			}
		})
	}
}

// TestSettingError_R9_caddyfile: Caddyfile errors about a setting, found
// at its line or once the block is read, carry the setting, as errors.As
// finds it.
func TestSettingError_R9_caddyfile(t *testing.T) {
	for _, tc := range []struct {
		input, setting string
		also           []string
		mod            caddyfile.Unmarshaler
	}{
		{"dicer {\n token " + cfToken + "\n}", "token", []string{"address"}, new(DicerUpstreams)},
		{"dicer {\n address 192.0.2.10:7443\n}", "token", []string{"address"}, new(DicerPermission)},
		{"dicer {\n address 192.0.2.10:7443\n token dicer_tooshort\n}", "token", nil, new(DicerUpstreams)},
		{"dicer {\n address dicer.example\n}", "address", nil, new(DicerUpstreams)},
		{"dicer {\n published_port_host localhost\n}", "published_port_host", nil, new(DicerUpstreams)},
		{"docker {\n tls {\n  ca /a.pem\n }\n}", "tls", []string{"address"}, new(DockerPermission)},
		{"docker {\n address tcp://127.0.0.1:2376\n tls {\n  cert /a.pem\n }\n}", "tls cert", nil, new(DockerUpstreams)},
		{"swarm {\n address ssh://manager\n}", "address", nil, new(SwarmUpstreams)},
		// Found at the setting's own line, while the block is read.
		{"dicer {\n readiness_timeout soon\n}", "readiness_timeout", nil, new(DicerUpstreams)},
		{"dicer app=web 0", "port", nil, new(DicerUpstreams)},
		{"dicer {\n allow_suffix *.example.com\n}", "allow_suffix", nil, new(DicerPermission)},
		{"docker {\n max_held 0\n}", "max_held", nil, new(DockerUpstreams)},
		{"docker {\n depends_on_scope everyone\n}", "depends_on_scope", nil, new(DockerUpstreams)},
		{"docker {\n max_orders_per_domain -1\n}", "max_orders_per_domain", nil, new(DockerPermission)},
		{"dicer {\n obtain_timeout soon\n}", "obtain_timeout", nil, new(DicerPermission)},
		{"docker {\n wake_timeout -1s\n}", "wake_timeout", nil, new(DockerUpstreams)},
		{"swarm {\n endpoint dnsrr\n}", "endpoint", nil, new(SwarmPermission)},
	} {
		err := tc.mod.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		var se *SettingError
		if !errors.As(err, &se) || se.Setting != tc.setting || !slices.Equal(se.Also, tc.also) {
			t.Errorf("%q: error %v, SettingError %+v; want setting %q, also %q", tc.input, err, se, tc.setting, tc.also)
		}
	}
}

// TestSettingError_R9_provision: a JSON user finds the setting at fault in
// a module's Provision error with errors.As, for every backend.
func TestSettingError_R9_provision(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		json, setting string
		mod           interface {
			caddy.Provisioner
			caddy.CleanerUpper
		}
	}{
		{`{"token":"` + cfToken + `"}`, "token", new(DicerUpstreams)},
		{`{"address":"192.0.2.10:7443"}`, "token", new(DicerPermission)},
		{`{"address":"192.0.2.10:7443","token":"` + cfTokenNoFP + `","tls":{"ca":"` + missing + `"}}`, "tls ca", new(DicerUpstreams)},
		{`{"readiness_timeout":"-1s"}`, "readiness_timeout", new(DicerPermission)},
		{`{"port":70000}`, "port", new(DicerUpstreams)},
		{`{"wildcards":"yes"}`, "wildcards", new(DicerPermission)},
		{`{"allow_suffix":["*.example.com"]}`, "allow_suffix", new(DockerPermission)},
		{`{"published_port_host":"localhost"}`, "published_port_host", new(DockerUpstreams)},
		{`{"max_wakes":-1}`, "max_wakes", new(DockerUpstreams)},
		{`{"heal_max_restarts":-1}`, "heal_max_restarts", new(DockerUpstreams)},
		{`{"depends_on_scope":"all"}`, "depends_on_scope", new(DockerPermission)},
		{`{"max_orders_per_instance":-2}`, "max_orders_per_instance", new(SwarmPermission)},
		{`{"obtain_timeout":"-1s"}`, "obtain_timeout", new(DockerPermission)},
		{`{"wake_timeout":"-1s"}`, "wake_timeout", new(DockerUpstreams)},
		{`{"address":"tcp://127.0.0.1:2376","tls":{"ca":"` + missing + `"}}`, "tls ca", new(DockerPermission)},
		{`{"endpoint":"dnsrr"}`, "endpoint", new(SwarmUpstreams)},
		{`{"address":"tcp://manager"}`, "address", new(SwarmPermission)},
	} {
		if err := json.Unmarshal([]byte(tc.json), tc.mod); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := newLoad(t)
		err := tc.mod.Provision(ctx)
		cancel()
		if err == nil {
			_ = tc.mod.Cleanup()
		}
		var se *SettingError
		if !errors.As(err, &se) || se.Setting != tc.setting {
			t.Errorf("%T %s: error %v, SettingError %+v; want setting %q", tc.mod, tc.json, err, se, tc.setting)
		}
	}
}
