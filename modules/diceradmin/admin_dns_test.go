package diceradmin

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/connection"
	"github.com/caddy-dicer/caddy-dicer/internal/dnsrecords"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// dnsPerm is a permission with dns_records, and one without.
type dnsPerm struct{ zones []dnsrecords.ZoneStatus }

func (dnsPerm) Decide(string) error                  { return errors.New("no") }
func (p dnsPerm) DNSStatus() []dnsrecords.ZoneStatus { return p.zones }

type plainPerm struct{}

func (plainPerm) Decide(string) error { return nil }

// R7e: GET /dicer/dns lists each zone of each permission with
// dns_records, with its daemon; a permission without lists nothing.
func TestAdminDNS_R7e_lists_the_zones(t *testing.T) {
	conn := connection.Fixture{Kind: "docker", Address: "unix:///" + t.Name() + ".sock", Catalog: catalog.New(catalog.Options{})}.Conn()
	key := "admin-dns-test\x00" + t.Name()
	if err := dicerapp.Adopt(key, conn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dicerapp.Release(key) })
	conn.AddPermission(&plainPerm{})
	conn.AddPermission(&dnsPerm{zones: []dnsrecords.ZoneStatus{{Zone: "example.test", Published: 2, Pending: 1, LastError: "read: refused"}}})

	rec := httptest.NewRecorder()
	if err := (adminDicer{}).dns(rec, httptest.NewRequest("GET", "/dicer/dns", nil)); err != nil {
		t.Fatal(err)
	}
	var got []DNSZoneStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	var mine []DNSZoneStatus
	for _, z := range got {
		if z.Daemon == conn.Address() {
			mine = append(mine, z)
		}
	}
	if len(mine) != 1 || mine[0].Kind != "docker" || mine[0].Zone != "example.test" || mine[0].Published != 2 || mine[0].LastError != "read: refused" {
		t.Fatalf("got %+v\n%s", mine, rec.Body)
	}
}
