package engine

// Several daemons in one Caddy, through a real in-process Caddy: Caddy's
// own `dynamic multi` over two test daemons (internal/dicertest; they are
// not Dicer) and the machine's real Docker Engine, and `permission
// daemons` over the same three.

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
	"github.com/caddy-dicer/caddy-dicer/internal/dockertest"
	"github.com/caddy-dicer/caddy-dicer/modules/dicerapp"
)

// TestCaddy_multi_two_daemons_and_the_Engine is item 1 of "several
// daemons in one Caddy": one route over two test daemons and the Docker
// Engine with `dynamic multi`, each source on its own shared connection,
// upstreams in the multi's order, R5 across the daemons (no instance woken
// while another daemon has a routable one; one woken for the route), and
// `permission daemons` allowing a host claimed on any of them.
func TestCaddy_multi_two_daemons_and_the_Engine(t *testing.T) {
	cli := engine(t)
	a, sockA := dicertest.OnSocket(t)
	b, sockB := dicertest.OnSocket(t)
	app := dockertest.Name("multi")
	web := map[string]string{"app": app}
	a.HelloInstance(t, "a-web", "127.0.0.141", web)
	b.HelloInstance(t, "b-web", "127.0.0.142", web)
	d := dockertest.Start(t, cli, dockertest.Options{Name: "multi-web", Labels: web})
	dName := "multi-web" // what it answers
	hostA, hostB, hostD := hostName("multi-a"), hostName("multi-b"), hostName("multi-d")
	claimA := a.HelloInstance(t, "a-claim", "127.0.0.143", map[string]string{"caddy.host": hostA})
	a.SetState(claimA.GetName(), dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	claimB := b.HelloInstance(t, "b-claim", "127.0.0.144", map[string]string{"caddy.host": hostB})
	b.SetState(claimB.GetName(), dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	dockertest.Start(t, cli, dockertest.Options{Name: "multi-claim", Labels: map[string]string{"caddy.host": hostD}, NoStart: true})

	daemonA := fmt.Sprintf("address unix:%s\n\t\t\t\tpublished_port_host 127.0.0.145", sockA)
	daemonB := fmt.Sprintf("address unix:%s\n\t\t\t\tpublished_port_host 127.0.0.146", sockB)
	multi := func(policy string) string {
		return fmt.Sprintf(`
	reverse_proxy {
		dynamic multi {
			dicer app=%[1]s {
				%[2]s
			}
			dicer app=%[1]s {
				%[3]s
			}
			docker app=%[1]s 8080
		}
		lb_policy %[4]s
		%[5]s
	}`, app, daemonA, daemonB, policy, upstreamHeader)
	}
	roundRobin, first := hostName("multi-rr"), hostName("multi-first")
	tester, _ := dockerCaddy(t, fmt.Sprintf(`
on_demand_tls {
	permission daemons {
		dicer {
			%s
		}
		dicer {
			%s
		}
		docker
	}
}`, daemonA, daemonB), fmt.Sprintf(`
http://%s:%d {%s
}
http://%s:%d {%s
}
https:// {
	tls internal {
		on_demand
	}
	respond "on demand"
}`, roundRobin, httpPort, multi("round_robin"), first, httpPort, multi("first")))

	// Each source has its own shared connection: each daemon's is used by
	// the two routes and the permission.
	for name, daemon := range map[string][2]string{
		"daemon a":   {"dicer", "unix:" + sockA},
		"daemon b":   {"dicer", "unix:" + sockB},
		"the Engine": {"docker", ""},
	} {
		if refs := dicerapp.Holders(openConnection(daemon[0], daemon[1])); refs != 3 {
			t.Errorf("%s: %d modules share its connection, want 3 (two routes, the permission)", name, refs)
		}
	}

	// All three daemons serve the route, evenly.
	answersWithin(t, tester, roundRobin, http.StatusOK, hello(dName), waitFor) // the container is up
	counts := map[string]int{}
	for range 30 {
		counts[mustGet(t, tester, roundRobin, http.StatusOK, "").body]++
	}
	for _, name := range []string{"a-web", "b-web", dName} {
		if counts[hello(name)] != 10 {
			t.Errorf("%s got %d of 30 requests, want 10 (all: %v)", name, counts[hello(name)], counts)
		}
	}

	// Order: the sources' upstreams in the multi's order, so lb_policy
	// first fails over from one daemon to the next.
	mustGet(t, tester, first, http.StatusOK, hello("a-web"))
	a.SetState("a-web", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	answersWithin(t, tester, first, http.StatusOK, hello("b-web"), changeWithin)
	b.SetState("b-web", dicerpb.InstanceState_INSTANCE_STATE_STOPPED, nil)
	answersWithin(t, tester, first, http.StatusOK, hello(dName), changeWithin)

	// R5 across daemons: daemon a has an instance on standby, the Engine a
	// routable container. Alone, a's source would return its standby
	// instance as the fallback and half of the requests would wake it.
	// (They list the route's host, by which the test sees them arrive.)
	asleep := map[string]string{"app": app, "caddy.host": roundRobin}
	a.AsleepInstance(t, "a-asleep", "127.0.0.145", asleep)
	b.AsleepInstance(t, "b-asleep", "127.0.0.146", asleep)
	eventually(t, "both daemons' catalogs hold their standby instance", func() bool {
		return lists(t, "unix:"+sockA, roundRobin) && lists(t, "unix:"+sockB, roundRobin)
	})
	for range 20 {
		mustGet(t, tester, roundRobin, http.StatusOK, hello(dName))
	}
	// With the container stopped, one instance is woken for the route: the
	// first source's, never the second's as well.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cli.ContainerStop(ctx, d.ID, container.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	answersWithin(t, tester, roundRobin, http.StatusOK, hello("a-asleep"), changeWithin)
	for range 20 {
		mustGet(t, tester, roundRobin, http.StatusOK, hello("a-asleep"))
	}

	// The permission allows a host claimed on any of the three daemons,
	// whatever the claimant's state, and no other.
	for _, name := range []string{hostA, hostB, hostD} {
		if err := tlsHandshake(name); err != nil {
			t.Errorf("host %s, claimed on one daemon: handshake failed: %v", name, err)
		}
	}
	for _, name := range []string{hostName("multi-evil"), "example.com"} {
		if err := tlsHandshake(name); err == nil {
			t.Errorf("unclaimed host %s: handshake succeeded", name)
		}
	}
}

// lists reports whether an instance of daemon, in any state, lists host
// in its caddy.host label, as the daemon's shared connection knows it.
func lists(t *testing.T, address, host string) bool {
	t.Helper()
	c := openConnection("dicer", address)
	if c == nil {
		t.Fatal("no connection to the daemon")
	}
	return c.Catalog().Snapshot().ListsExactly(host)
}
