package docker

import (
	"fmt"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-connections/nat"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/selector"
)

// benchContainer is a synthetic inspection of container i: running,
// labelled app=web (three of them) or app=svc-<i%50>, with a caddy.host,
// on the bridge network, publishing 8080 on every address.
func benchContainer(i int, state string) container.InspectResponse {
	app := fmt.Sprintf("svc-%d", i%50)
	if i < 3 {
		app = "web"
	}
	st := container.State{Status: state, Running: state == "running" || state == "paused", Paused: state == "paused"}
	return container.InspectResponse{
		ContainerJSONBase: &container.ContainerJSONBase{ID: fmt.Sprintf("id-%05d", i), Name: fmt.Sprintf("/svc-%05d", i), State: &st},
		Config: &container.Config{Labels: map[string]string{
			"app":                        app,
			catalog.LabelHost:            fmt.Sprintf("svc-%05d.example.com", i),
			"com.docker.compose.project": "bench",
		}},
		NetworkSettings: &container.NetworkSettings{
			NetworkSettingsBase: container.NetworkSettingsBase{Ports: nat.PortMap{ //nolint:staticcheck // Ports moves out of it only in v29
				"8080/tcp": {{HostIP: "0.0.0.0", HostPort: fmt.Sprint(20000 + i)}, {HostIP: "::", HostPort: fmt.Sprint(20000 + i)}},
			}},
			Networks: map[string]*network.EndpointSettings{"bridge": {
				IPAddress: fmt.Sprintf("172.17.%d.%d", i/256, i%256+2),
				Gateway:   "172.17.0.1",
			}},
		},
	}
}

// BenchmarkApplyEvent is the adapter's own work per Engine event once the
// inspection is back: translate the InspectResponse and Put it into a real
// catalog holding n containers (with three selector views watched, as
// routes would). The container flips between running and paused, so
// every Put changes what is routable.
func BenchmarkApplyEvent(b *testing.B) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			c := catalog.New(catalog.Options{})
			for _, s := range []string{"app=web", "app=svc-7", "app in (web,edge),!internal"} {
				sel, err := selector.Parse(s)
				if err != nil {
					b.Fatal(err)
				}
				c.Watch(sel)
			}
			all := make([]catalog.Instance, n)
			for i := range n {
				all[i] = fromInspect(benchContainer(i, "running"))
			}
			c.Replace(all)
			events := [2]container.InspectResponse{benchContainer(1, "paused"), benchContainer(1, "running")}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				c.Put(fromInspect(events[i&1]))
				i++
			}
		})
	}
}
