package rfc2136

import (
	"context"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
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

// TestRFC2136_R7e_slow_transfer_bounded_by_timeout: a server that keeps
// a zone transfer going with one small signed message every 200 ms (each
// well within the timeout, so no read ever times out) has the transfer
// end with an error once the provider's timeout has passed since it
// began, though the caller's context has no deadline: timeout bounds the
// exchange as a whole, as its documentation says, not each message.
func TestRFC2136_R7e_slow_transfer_bounded_by_timeout(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	f := startFake(t, testSecret, func(w dns.ResponseWriter, r *dns.Msg) {
		soa, _ := dns.NewRR("example.test. 300 IN SOA ns.example.test. h.example.test. 1 3600 600 86400 60")
		ts := r.IsTsig()
		for i := 0; i < 150; i++ {
			m := new(dns.Msg)
			m.SetReply(r)
			m.Answer = []dns.RR{aRecord(i)}
			if i == 0 {
				m.Answer = []dns.RR{soa}
			}
			m.SetTsig(ts.Hdr.Name, ts.Algorithm, 300, time.Now().Unix())
			if w.WriteMsg(m) != nil {
				return
			}
			w.TsigTimersOnly(true)
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	p := f.provider()
	p.Timeout = caddy.Duration(time.Second)
	errs := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := p.GetRecords(context.Background(), "example.test")
		errs <- err
	}()
	select {
	case err := <-errs:
		took := time.Since(start)
		t.Logf("a transfer trickled a message every 200 ms, timeout 1s: ended after %v: %v", took.Round(10*time.Millisecond), err)
		if err == nil {
			t.Fatal("the trickled transfer succeeded, want an error")
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("a transfer trickled a message every 200 ms still runs after 15s, with timeout 1s")
	}
}
