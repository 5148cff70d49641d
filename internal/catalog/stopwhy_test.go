package catalog_test

import (
	"testing"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
)

// R6b: the leave of an instance that an event says is stopping says what
// the event told ("exited with code 1", a standby), not "stopping"; later
// descriptions of it while it drains log nothing more.
func TestLeaveSaysWhatTheStopEventTold(t *testing.T) {
	logger, logs := observed()
	c := catalog.New(catalog.Options{Logger: logger})
	web := label("app", "web")
	c.Put(inst("web-1", web, port("8080")))
	c.Put(inst("web-2", web, port("8080")))
	logs.TakeAll()
	c.StoppingBecause("id-web-1", "exited with code 1 (crashed or failed)")
	c.Put(inst("web-1", web, port("8080"))) // still running while it dies
	c.Stopping("id-web-2")                  // nothing told
	got := describe(logs.TakeAll())
	want := []string{
		"info instance leaves rotation instance=web-1 why=exited with code 1 (crashed or failed)",
		"info instance leaves rotation instance=web-2 why=stopping",
	}
	if !equal(got, want) {
		t.Errorf("log:\n  got  %q\n  want %q", got, want)
	}
	var _ catalog.StoppingBecause = c
}
