package docker

import (
	"context"
	"errors"
	"testing"
)

// The plugin writes to the Engine only for a container labelled
// caddy.standby_after: any other is refused before any call.
func TestActions_refuse_unlabelled(t *testing.T) {
	a, err := New(Config{Host: "unix:///nonexistent/docker.sock"})
	if err != nil {
		t.Fatal(err)
	}
	x := a.Actions()
	defer x.Close()
	ctx := context.Background()
	labels := map[string]string{"caddy.host": "shop.example.com"}
	for name, call := range map[string]func(context.Context, string, map[string]string) error{
		"start": x.Start, "stop": x.Stop, "pause": x.Pause, "unpause": x.Unpause,
	} {
		if err := call(ctx, "abc", labels); !errors.Is(err, ErrNotLabelled) {
			t.Errorf("%s of an unlabelled container: %v, want ErrNotLabelled", name, err)
		}
	}
	if x.cli != nil {
		t.Error("a client was made for refused calls")
	}
}

// Restart (healing, R1e) is for a container labelled caddy.heal only: a
// caddy.standby_after label alone does not allow it.
func TestHeal_R1e_restart_refuses_unlabelled(t *testing.T) {
	a, err := New(Config{Host: "unix:///nonexistent/docker.sock"})
	if err != nil {
		t.Fatal(err)
	}
	x := a.Actions()
	defer x.Close()
	labels := map[string]string{"caddy.host": "shop.example.com", "caddy.standby_after": "5m"}
	if err := x.Restart(context.Background(), "abc", labels); !errors.Is(err, ErrNotHealed) {
		t.Errorf("restart of a container without caddy.heal: %v, want ErrNotHealed", err)
	}
	if x.cli != nil {
		t.Error("a client was made for a refused call")
	}
}
