package follow

import (
	"strings"
	"testing"
)

func TestCheckPublishedPortHost(t *testing.T) {
	for _, ok := range []string{"", "10.0.0.5", "192.0.2.1", "2001:db8::1", "127.0.0.1", "::1", "docker-host", "host.example.com", "host.example.com.", "my_host.lan"} {
		if err := CheckPublishedPortHost(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for bad, why := range map[string]string{
		"localhost":                              "names this machine",
		"LocalHost.":                             "names this machine",
		"app.localhost":                          "names this machine",
		"0.0.0.0":                                "unspecified",
		"::":                                     "unspecified",
		"10.0.0.5:8080":                          "has a port",
		"host.example.com:80":                    "has a port",
		"[2001:db8::1]":                          "bracketed",
		"[2001:db8::1]:80":                       "bracketed",
		"http://10.0.0.5":                        "URL",
		"https://host.example":                   "URL",
		"host/path":                              "not a host name",
		"user@host":                              "not a host name",
		"fe80::1%eth0":                           "zone",
		"bad host":                               "neither",
		"-bad.example.com":                       "neither",
		"10.0.0":                                 "neither",
		strings.Repeat("a", 64):                  "neither",
		"a." + strings.Repeat("b.", 130) + "com": "neither",
	} {
		err := CheckPublishedPortHost(bad)
		if err == nil {
			t.Errorf("%q accepted", bad)
			continue
		}
		if !strings.HasPrefix(err.Error(), "published_port_host: ") || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: error %q should name the setting and say %q", bad, err, why)
		}
	}
}

func TestDialableHostIP(t *testing.T) {
	for ip, want := range map[string]bool{
		"": true, "10.1.2.3": true, "192.0.2.1": true, "2001:db8::1": true, "127.0.0.1": true, "0.0.0.0": true,
		"169.254.169.254": false, "169.254.0.1": false, "fe80::1": false, "fe80::1%eth0": false,
		"224.0.0.1": false, "ff02::1": false, "255.255.255.255": false, "::ffff:169.254.169.254": false,
		"metadata.google.internal": false, "10.0.0.1:80": false,
	} {
		if got := DialableHostIP(ip); got != want {
			t.Errorf("DialableHostIP(%q) = %v, want %v", ip, got, want)
		}
	}
}
