package caddydicer

import (
	"strings"
	"testing"
)

// TestCaddyfile_PublishedPortHostRefused: published_port_host takes an IP
// address or a DNS name, never localhost (R4) nor 0.0.0.0, a port or a URL; `caddy
// adapt` names the setting and the line.
func TestCaddyfile_PublishedPortHostRefused(t *testing.T) {
	for _, kind := range []string{"dicer", "docker"} {
		for value, why := range map[string]string{
			"localhost":          "names this machine",
			"0.0.0.0":            "unspecified",
			"10.0.0.5:8080":      "has a port",
			"http://10.0.0.5":    "URL",
			"host.example.com/x": "not a host name",
		} {
			t.Run(kind+"_"+value, func(t *testing.T) {
				input := "http://:9080 {\n\treverse_proxy {\n\t\tdynamic " + kind + " {\n\t\t\tpublished_port_host " + value + "\n\t\t}\n\t}\n}\n"
				err := cfUnmarshalError(t, caddyfileErrorCase{module: "adapt", input: input})
				if err == nil {
					t.Fatalf("published_port_host %s accepted", value)
				}
				for _, w := range []string{"published_port_host", why, "Caddyfile:4"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			})
		}
	}
	// An IP address or a DNS name is fine.
	for _, value := range []string{"10.0.0.5", "127.0.0.1", "docker-host.lan"} {
		input := "http://:9080 {\n\treverse_proxy {\n\t\tdynamic docker {\n\t\t\tpublished_port_host " + value + "\n\t\t}\n\t}\n}\n"
		if err := cfUnmarshalError(t, caddyfileErrorCase{module: "adapt", input: input}); err != nil {
			t.Errorf("published_port_host %s refused: %v", value, err)
		}
	}
}
