package caddydicer

import (
	"context"
	"errors"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddytls"
)

// TestCertificateAllowed_R7_underscore_label_refused: a name with a label
// starting with '_' (where DNS keeps a domain's ACME DNS-01 challenges,
// DKIM keys, service records and the dns_records owner TXT) gets no
// certificate, whether a label lists it exactly or a wildcard the
// permission allows matches it.
func TestCertificateAllowed_R7_underscore_label_refused(t *testing.T) {
	p := permissionFor(t, hostPermission{AllowSuffix: []string{"example.com"}, Wildcards: "allow"},
		claimant("exact", "_acme-challenge.example.com,_acme-challenge.shop.example.com,a._domainkey.example.com,_caddy-dicer.shop.example.com"),
		claimant("wild", "*.example.com"),
		claimant("shop", "shop.example.com"))
	ctx := context.Background()
	for _, name := range []string{
		"_acme-challenge.example.com", "_acme-challenge.shop.example.com", "a._domainkey.example.com",
		"_caddy-dicer.shop.example.com", "_dmarc.example.com", "_ACME-Challenge.Example.com",
	} {
		err := p.CertificateAllowed(ctx, name)
		if err == nil || !errors.Is(err, caddytls.ErrPermissionDenied) {
			t.Errorf("%s: %v, want refused (a label starts with '_')", name, err)
		}
	}
	for _, name := range []string{"shop.example.com", "x.example.com"} {
		if err := p.CertificateAllowed(ctx, name); err != nil {
			t.Errorf("%s: %v, want allowed", name, err)
		}
	}
}
