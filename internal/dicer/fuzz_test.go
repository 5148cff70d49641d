package dicer

import (
	"strings"
	"testing"
)

// FuzzParseToken checks ParseToken on any input:
//   - a parsed token's Value is the trimmed input, and parses to the same
//     token;
//   - its String never holds the secret (short of the fingerprint, which
//     is public, holding it);
//   - an error never depends on the secret's characters, only on its
//     shape, so it cannot echo it;
//   - Config.Validate with the token and a TCP address never echoes the
//     secret either.
func FuzzParseToken(f *testing.F) {
	secret := "izmpcvh2km6jqwtqdye6eyys7cuvovfnxt3mogal2tpj2je7nseq"
	fp := "8b7f3a37a5cc5474ebeaa9e78f6ea463ca321c661ed6eb909dd63fdad31eebbd"
	for _, s := range []string{
		"dicer_" + secret,
		"dicer_" + secret + "_" + fp,
		"  dicer_" + secret + "_" + fp + "\n",
		"dicer_" + secret + "_",
		"dicer_" + secret + "_" + fp[:40],
		"dicer_" + secret + "_" + strings.ToUpper(fp),
		"dicer_" + secret[:31],
		"dicer_" + secret[:20] + "-" + secret[21:],
		"dicr_" + secret,
		"dicer_",
		"",
		" \t",
		"dicer_" + strings.Repeat("a", 32) + "_" + strings.Repeat("a", 64),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		tok, err := ParseToken(in)
		if err != nil {
			checkTokenError(t, in, err)
			return
		}
		if v := tok.Value(); v != strings.TrimSpace(in) {
			t.Fatalf("ParseToken(%q).Value() = %q, want the trimmed input", in, v)
		}
		again, err := ParseToken(tok.Value())
		if err != nil || again != tok {
			t.Fatalf("ParseToken(%q) = %#v, but its Value parses to %#v, %v", in, tok, again, err)
		}
		if len(tok.Secret) < 32 {
			t.Fatalf("ParseToken(%q): secret of %d characters accepted", in, len(tok.Secret))
		}
		if s := tok.String(); strings.Contains(s, tok.Secret) && !strings.Contains(tok.Fingerprint, tok.Secret) {
			t.Fatalf("ParseToken(%q).String() = %q holds the secret", in, s)
		}
		err = Config{Address: "192.0.2.10:7443", Token: in, ServerName: "dicer.example"}.Check()
		if (err != nil) != (tok.Fingerprint != "") {
			t.Fatalf("Check with token %q and a server name: %v", in, err)
		}
		if err != nil && strings.Contains(err.Error(), tok.Secret) {
			t.Fatalf("Check with token %q: error %q holds the secret", in, err)
		}
	})
}

// checkTokenError checks that ParseToken's error for in would be the same
// whatever the letters and digits of the secret part (after "dicer_", up
// to the first "_") were: an error that does not depend on them cannot echo
// them.
func checkTokenError(t *testing.T, in string, err error) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") || msg == "" {
		t.Fatalf("ParseToken(%q): error %q is not one line", in, msg)
	}
	trimmed := strings.TrimSpace(in)
	rest, ok := strings.CutPrefix(trimmed, "dicer_")
	if !ok {
		return
	}
	secret, _, _ := strings.Cut(rest, "_")
	if len(secret) >= 8 && strings.Contains(msg, secret) {
		t.Fatalf("ParseToken(%q): error %q echoes the secret", in, msg)
	}
	start := strings.Index(in, trimmed) + len("dicer_")
	twin := []byte(in)
	for i := start; i < start+len(secret); i++ {
		twin[i] = rotateAlnum(twin[i])
	}
	_, twinErr := ParseToken(string(twin))
	if twinErr == nil || twinErr.Error() != msg {
		t.Fatalf("ParseToken(%q) = %q, but with other letters in the secret, ParseToken(%q) = %v: the error depends on the secret", in, msg, twin, twinErr)
	}
}

// rotateAlnum maps an ASCII letter or digit to the next one of its kind,
// and any other byte to itself.
func rotateAlnum(c byte) byte {
	switch {
	case c == 'z':
		return 'a'
	case c == 'Z':
		return 'A'
	case c == '9':
		return '0'
	case isAlnum(c):
		return c + 1
	}
	return c
}
