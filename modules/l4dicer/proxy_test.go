package l4dicer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	_ "github.com/caddy-dicer/caddy-dicer" // the sources
)

func TestUnmarshalCaddyfile_takes_its_own_settings_and_hands_the_rest_to_the_source(t *testing.T) {
	d := caddyfile.NewTestDispenser(`dicer_proxy docker app=pg 5432 {
		wake_on connect
		address tcp://127.0.0.1:2376
		dial_timeout 3s
		tls {
			ca /etc/ca.pem
		}
	}`)
	var p Proxy
	if err := p.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if p.WakeOn != "connect" || time.Duration(p.DialTimeout) != 3*time.Second {
		t.Errorf("wake_on %q dial_timeout %s, want connect 3s", p.WakeOn, time.Duration(p.DialTimeout))
	}
	var src map[string]any
	if err := json.Unmarshal(p.SourceRaw, &src); err != nil {
		t.Fatal(err)
	}
	if src["source"] != "docker" || src["selector"] != "app=pg" || src["port"] != float64(5432) || src["address"] != "tcp://127.0.0.1:2376" {
		t.Errorf("source %s", p.SourceRaw)
	}
	if strings.Contains(string(p.SourceRaw), "wake_on") || strings.Contains(string(p.SourceRaw), "dial_timeout") {
		t.Errorf("the handler's settings reached the source: %s", p.SourceRaw)
	}
	if !strings.Contains(string(p.SourceRaw), "/etc/ca.pem") {
		t.Errorf("the source's tls block was lost: %s", p.SourceRaw)
	}
}

func TestUnmarshalCaddyfile_errors_name_the_setting(t *testing.T) {
	for in, want := range map[string]string{
		`dicer_proxy`: "needs a source",
		"dicer_proxy docker app=pg 5432 {\n wake_on x\n}":    "wake_on",
		"dicer_proxy docker {\n dial_timeout -1s\n}":         "dial_timeout",
		"dicer_proxy docker {\n bogus 1\n}":                  "bogus",
		"dicer_proxy docker {\n max_waiting_per_client 0\n}": "max_waiting_per_client",
		`dicer_proxy nosuch`:                                 "nosuch",
	} {
		var p Proxy
		err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %q", in, err, want)
		}
	}
}
