package rfc2136

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestRFC2136_R7e_unsigned_transfer_message_refused: a zone transfer
// from a server that signs only part of its answer (the first SOA and
// not what follows, or nothing, or with another key) is an error, and
// nothing of it is kept: a spoofed or compromised server cannot slip
// unsigned records into what the publisher reads as the zone.
func TestRFC2136_R7e_unsigned_transfer_message_refused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret string
		signed func(msg int) bool
	}{
		{"first only", testSecret, func(msg int) bool { return msg == 0 }},
		{"none", testSecret, func(int) bool { return false }},
		{"the last not", testSecret, func(msg int) bool { return msg < 2 }},
		{"another key", "b3RoZXIta2V5LW90aGVyLWtleQ==", func(int) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, tc.secret, func(w dns.ResponseWriter, r *dns.Msg) {
				soa, _ := dns.NewRR("example.test. 300 IN SOA ns.example.test. h.example.test. 1 3600 600 86400 60")
				ts := r.IsTsig()
				for i, rrs := range [][]dns.RR{{soa}, {aRecord(1), aRecord(2)}, {soa}} {
					m := new(dns.Msg)
					m.SetReply(r)
					m.Answer = rrs
					if ts != nil && tc.signed(i) {
						m.SetTsig(ts.Hdr.Name, ts.Algorithm, 300, time.Now().Unix())
					}
					if w.WriteMsg(m) != nil {
						return
					}
					w.TsigTimersOnly(true)
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			recs, err := f.provider().GetRecords(ctx, "example.test")
			if err == nil || recs != nil {
				t.Fatalf("%d records, %v; want an error and nothing kept", len(recs), err)
			}
			t.Logf("refused: %v", err)
		})
	}
}
