package caddydicer

import (
	"errors"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/caddy-dicer/caddy-dicer/internal/setting"
)

// R5q: the queue's settings parse from the source's block; a bad value
// names its setting.
func TestQueueCaddyfile_R5q_settings(t *testing.T) {
	var u DicerUpstreams
	d := caddyfile.NewTestDispenser(`dicer {
		address unix:/run/dicer.sock
		max_requests 8
		queue_size 20
		queue_timeout 3s
	}`)
	if err := u.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if u.MaxRequests != 8 || u.QueueSize != 20 || time.Duration(u.QueueTimeout) != 3*time.Second {
		t.Fatalf("max_requests %d, queue_size %d, queue_timeout %s", u.MaxRequests, u.QueueSize, time.Duration(u.QueueTimeout))
	}
	for in, name := range map[string]string{
		"max_requests 0":        "max_requests",
		"max_requests 100001":   "max_requests",
		"max_requests x":        "max_requests",
		"queue_size 0":          "queue_size",
		"queue_size 1000000":    "queue_size",
		"queue_timeout 0s":      "queue_timeout",
		"queue_timeout forever": "queue_timeout",
	} {
		var u DicerUpstreams
		err := u.UnmarshalCaddyfile(caddyfile.NewTestDispenser("dicer {\n\taddress unix:/run/dicer.sock\n\t" + in + "\n}"))
		var se *setting.Error
		if !errors.As(err, &se) || se.Setting != name {
			t.Errorf("%s: %v, want an error naming %s", in, err, name)
		}
	}
}
