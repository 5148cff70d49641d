package dicer

import (
	"strings"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/follow"
)

const (
	secret52 = "abcdefghijklmnopqrstuvwxyz234567abcdefghijklmnopqrst" // like a generated secret
	fpHex    = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Token
		wantErr string // substring; "" means success
	}{
		{name: "with fingerprint", in: "dicer_" + secret52 + "_" + fpHex, want: Token{Secret: secret52, Fingerprint: fpHex}},
		{name: "without fingerprint", in: "dicer_" + secret52, want: Token{Secret: secret52}},
		{name: "whitespace trimmed", in: "  \tdicer_" + secret52 + "_" + fpHex + "\n", want: Token{Secret: secret52, Fingerprint: fpHex}},
		{name: "caller-supplied secret of 32 mixed-case letters and digits", in: "dicer_" + "ABCDEFGHIJKLMNOPqrstuvwxyz012345", want: Token{Secret: "ABCDEFGHIJKLMNOPqrstuvwxyz012345"}},
		{name: "empty", in: "   ", wantErr: "empty"},
		{name: "missing prefix", in: secret52 + "_" + fpHex, wantErr: `does not start with "dicer_"`},
		{name: "wrong-case prefix", in: "Dicer_" + secret52, wantErr: `does not start with "dicer_"`},
		{name: "short secret", in: "dicer_" + secret52[:31], wantErr: "at least 32"},
		{name: "empty secret", in: "dicer__" + fpHex, wantErr: "at least 32"},
		{name: "secret with a symbol", in: "dicer_" + secret52[:40] + "-" + secret52[:10], wantErr: "only ASCII letters and digits"},
		{name: "trailing underscore: empty fingerprint", in: "dicer_" + secret52 + "_", wantErr: "64 lowercase hex"},
		{name: "second underscore inside fingerprint", in: "dicer_" + secret52 + "_" + fpHex[:32] + "_" + fpHex[:31], wantErr: "64 lowercase hex"},
		{name: "extra part after fingerprint", in: "dicer_" + secret52 + "_" + fpHex + "_x", wantErr: "64 lowercase hex"},
		{name: "short fingerprint", in: "dicer_" + secret52 + "_" + fpHex[:63], wantErr: "64 lowercase hex"},
		{name: "non-hex fingerprint", in: "dicer_" + secret52 + "_" + strings.Repeat("g", 64), wantErr: "64 lowercase hex"},
		{name: "uppercase hex fingerprint", in: "dicer_" + secret52 + "_" + strings.ToUpper(fpHex), wantErr: "64 lowercase hex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToken(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseToken = %+v, want an error containing %q", got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "malformed: ") {
					t.Errorf("error %q does not start with \"malformed: \"", err)
				}
				if strings.Contains(err.Error(), secret52[:20]) || strings.Contains(err.Error(), "ABCDEFGHIJ") {
					t.Errorf("error %q echoes the secret", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseToken: %v", err)
			}
			if got != tt.want {
				t.Fatalf("ParseToken = %+v, want %+v", got, tt.want)
			}
			if v := got.Value(); v != strings.TrimSpace(tt.in) {
				t.Errorf("Value() = %q, want the trimmed input", v)
			}
			if s := got.String(); strings.Contains(s, got.Secret) {
				t.Errorf("String() = %q reveals the secret", s)
			}
		})
	}
}

func TestConfigCheck(t *testing.T) {
	tokFP := "dicer_" + secret52 + "_" + fpHex
	tokNoFP := "dicer_" + secret52
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // exact prefix; "" means valid
	}{
		{name: "zero config: default socket", cfg: Config{}},
		{name: "unix absolute", cfg: Config{Address: "unix:///run/dicer/dicer.sock"}},
		{name: "unix single slash", cfg: Config{Address: "unix:/tmp/d.sock"}},
		{name: "unix abstract", cfg: Config{Address: "unix-abstract:dicer"}},
		{name: "tcp with fingerprinted token", cfg: Config{Address: "10.0.0.1:7443", Token: tokFP}},
		{name: "tcp with token and surrounding whitespace", cfg: Config{Address: "127.0.0.1:7443", Token: tokFP + "\n"}},
		{name: "tcp hostname", cfg: Config{Address: "dicer.example.com:7443", Token: tokFP}},
		{name: "tcp IPv6", cfg: Config{Address: "[fd00::1]:7443", Token: tokFP}},
		{name: "tcp CA-signed daemon with roots and server name", cfg: Config{Address: "10.0.0.1:7443", Token: tokNoFP, CAFile: "/etc/caddy/dicer-ca.pem", ServerName: "dicer.internal"}},
		{name: "tcp CA-signed daemon, system roots", cfg: Config{Address: "10.0.0.1:7443", Token: tokNoFP}},

		{
			name: "token with default socket", cfg: Config{Token: tokFP},
			wantErr: `token: not allowed with a unix socket address "unix:///run/dicer/dicer.sock"`,
		},
		{
			name: "token with unix socket", cfg: Config{Address: "unix:/tmp/d.sock", Token: tokFP},
			wantErr: `token: not allowed with a unix socket address "unix:/tmp/d.sock"`,
		},
		{
			name: "token with abstract socket", cfg: Config{Address: "unix-abstract:dicer", Token: tokFP},
			wantErr: `token: not allowed with a unix socket address "unix-abstract:dicer"`,
		},
		{
			name: "tcp without token", cfg: Config{Address: "10.0.0.1:7443"},
			wantErr: `token: required for the TCP address "10.0.0.1:7443"`,
		},
		{
			name: "tcp with blank token", cfg: Config{Address: "10.0.0.1:7443", Token: "  \n"},
			wantErr: `token: required for the TCP address "10.0.0.1:7443"`,
		},
		{
			name: "tcp with malformed token", cfg: Config{Address: "10.0.0.1:7443", Token: "dicer_short"},
			wantErr: `token: malformed: `,
		},
		{
			name: "tls with unix socket", cfg: Config{Address: "unix:/tmp/d.sock", CAFile: "/etc/caddy/dicer-ca.pem"},
			wantErr: `tls: not allowed with a unix socket address`,
		},
		{
			name: "tls with a fingerprinted token", cfg: Config{Address: "10.0.0.1:7443", Token: tokFP, ServerName: "x"},
			wantErr: `tls: not used with a token that carries`,
		},
		{name: "unix without path", cfg: Config{Address: "unix://"}, wantErr: `address: "unix://" names no socket path`},
		{name: "abstract without name", cfg: Config{Address: "unix-abstract:"}, wantErr: `address: "unix-abstract:" names no abstract socket`},
		{name: "tcp without port", cfg: Config{Address: "10.0.0.1", Token: tokFP}, wantErr: `address: "10.0.0.1" is none of`},
		{name: "url, not a target", cfg: Config{Address: "https://10.0.0.1:7443", Token: tokFP}, wantErr: `address: "https://10.0.0.1:7443" is none of`},
		{name: "tcp port out of range", cfg: Config{Address: "10.0.0.1:70000", Token: tokFP}, wantErr: `address: "10.0.0.1:70000": port "70000"`},
		{name: "negative backoff", cfg: Config{Pace: follow.Pace{Min: -1}}, wantErr: `backoff: must not be negative`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Check()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Check = nil, want %q", tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), tt.wantErr) {
				t.Fatalf("Check = %q, want it to start with %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), secret52[:20]) {
				t.Errorf("error %q echoes the token's secret", err)
			}
		})
	}
}

func TestIsTCP(t *testing.T) {
	for addr, want := range map[string]bool{
		"":                             false,
		"unix:///run/dicer/dicer.sock": false,
		"unix:/x":                      false,
		"unix-abstract:dicer":          false,
		"127.0.0.1:7443":               true,
		"dicer.example.com:7443":       true,
		"dns:///10.0.0.1:7443":         true,
	} {
		if got := IsTCP(addr); got != want {
			t.Errorf("IsTCP(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestDaemonHostAndListsNetworks(t *testing.T) {
	for addr, want := range map[string]string{
		"":                             "",
		"unix:///run/dicer/dicer.sock": "",
		"unix-abstract:dicer":          "",
		"127.0.0.1:7443":               "",
		"127.1.2.3:7443":               "",
		"[::1]:7443":                   "",
		"[::ffff:127.0.0.1]:7443":      "",
		"localhost:7443":               "",
		"LOCALHOST.:7443":              "",
		"dicer.localhost:7443":         "",
		"0.0.0.0:7443":                 "",
		"[::]:7443":                    "",
		"10.0.0.1:7443":                "10.0.0.1",
		"[fd00::1]:7443":               "fd00::1",
		"dicer.example.com:7443":       "dicer.example.com",
		"dns:///10.0.0.1:7443":         "10.0.0.1",
		"10.0.0.1":                     "", // not host:port
	} {
		if got := DaemonHost(addr); got != want {
			t.Errorf("DaemonHost(%q) = %q, want %q", addr, got, want)
		}
		// Networks are listed only when the daemon's host is not known
		// (R9): a token without networks:read works with a remote address.
		if got, want := listsNetworks(addr), want == ""; got != want {
			t.Errorf("listsNetworks(%q) = %v, want %v", addr, got, want)
		}
	}
}
