package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"syscall"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/standby"
)

// Actions are the only writes the plugin makes to the Engine: for scale
// to zero, start, stop, pause and unpause a container, and only one
// labelled caddy.standby_after; for healing (R1e), restart a container,
// and only one labelled caddy.heal (a socket proxy can allow exactly
// these: POST /containers/{id}/start, /stop, /pause, /unpause, /restart).
// Get them with Adapter.Actions; they share one Engine client, made at
// the first call.
type Actions struct {
	a    *Adapter
	once sync.Once
	cli  *client.Client
	err  error
}

// ErrNotLabelled is returned for a container without a valid
// caddy.standby_after label: the plugin never writes to another.
var ErrNotLabelled = errors.New("container is not labelled " + catalog.LabelStandbyAfter)

// Actions returns the adapter's write actions.
func (a *Adapter) Actions() *Actions { return &Actions{a: a} }

func (x *Actions) client() (*client.Client, error) {
	x.once.Do(func() { x.cli, x.err = x.a.NewClient() })
	return x.cli, x.err
}

// Close releases the Engine client.
func (x *Actions) Close() error {
	if x.cli != nil {
		return x.cli.Close()
	}
	return nil
}

// ErrNotHealed is returned by Restart for a container without a
// caddy.heal label.
var ErrNotHealed = errors.New("container is not labelled " + catalog.LabelHeal)

// Restart restarts a container labelled caddy.heal (R1e), giving it the
// Engine's stop timeout to drain, as Stop does.
func (x *Actions) Restart(ctx context.Context, id string, labels map[string]string) error {
	if _, ok := labels[catalog.LabelHeal]; !ok {
		return fmt.Errorf("docker %s: restart %s: %w", x.a.host, shortID(id), ErrNotHealed)
	}
	return x.call("restart", id, func(cli *client.Client) error {
		return cli.ContainerRestart(ctx, id, container.StopOptions{})
	})
}

// HealthInterval is the interval of the container's health check, the
// Engine's default (30 s) when it sets none: a read.
func (x *Actions) HealthInterval(ctx context.Context, id string) (time.Duration, error) {
	var interval time.Duration
	err := x.call("inspect", id, func(cli *client.Client) error {
		in, err := cli.ContainerInspect(ctx, id)
		if err == nil && in.Config != nil && in.Config.Healthcheck != nil {
			interval = in.Config.Healthcheck.Interval
		}
		return err
	})
	if interval <= 0 {
		interval = defaultInterval
	}
	return interval, err
}

// Start starts the container with this ID and labels; one already running
// is no error.
func (x *Actions) Start(ctx context.Context, id string, labels map[string]string) error {
	return x.do(ctx, "start", id, labels, func(cli *client.Client) error {
		return cli.ContainerStart(ctx, id, container.StartOptions{})
	})
}

// Stop stops it, giving it the Engine's stop timeout (its stop_grace_period
// or 10 s) to drain after its stop signal.
func (x *Actions) Stop(ctx context.Context, id string, labels map[string]string) error {
	return x.do(ctx, "stop", id, labels, func(cli *client.Client) error {
		return cli.ContainerStop(ctx, id, container.StopOptions{})
	})
}

// Pause freezes it.
func (x *Actions) Pause(ctx context.Context, id string, labels map[string]string) error {
	return x.do(ctx, "pause", id, labels, func(cli *client.Client) error { return cli.ContainerPause(ctx, id) })
}

// Unpause resumes it; one not paused is no error.
func (x *Actions) Unpause(ctx context.Context, id string, labels map[string]string) error {
	return x.do(ctx, "unpause", id, labels, func(cli *client.Client) error {
		err := cli.ContainerUnpause(ctx, id)
		if err != nil && cerrdefs.IsConflict(err) {
			return nil // not paused (any more)
		}
		return err
	})
}

// do runs one action, for a labelled container only, and wraps its error
// with the Engine's address, the action and the container.
func (x *Actions) do(ctx context.Context, action, id string, labels map[string]string, call func(*client.Client) error) error {
	if _, ok := labels[catalog.LabelStandbyAfter]; !ok {
		return fmt.Errorf("docker %s: %s %s: %w", x.a.host, action, id, ErrNotLabelled)
	}
	return x.call(action, id, call)
}

// call runs one call and wraps its error with the Engine's address, the
// action and the container.
func (x *Actions) call(action, id string, call func(*client.Client) error) error {
	cli, err := x.client()
	if err == nil {
		err = call(cli)
	}
	if err != nil {
		return fmt.Errorf("docker %s: %s %s: %w", x.a.host, action, shortID(id), err)
	}
	return nil
}

// Denied reports whether err says the Engine (or a socket proxy in front
// of it) refuses this client the action: retrying will not help until the
// operator changes the permissions.
func Denied(err error) bool {
	return cerrdefs.IsPermissionDenied(err) || cerrdefs.IsUnauthorized(err) || errors.Is(err, syscall.EACCES)
}

// Gone reports an Engine's answer that the container does not exist (a
// 404, or Podman's "no such container" in whatever status): it was
// removed, and its removal has not reached the catalog yet.
func Gone(err error) bool {
	return cerrdefs.IsNotFound(err) || podmanGone(err)
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ErrNoStandbyCPU is returned by CPU for a container without a
// caddy.standby_cpu label.
var ErrNoStandbyCPU = errors.New("container is not labelled " + catalog.LabelStandbyCPU)

// maxStatsBytes bounds the Engine's stats answer read by CPU.
const maxStatsBytes = 1 << 20

// CPU reads the CPU time a container labelled caddy.standby_cpu has used
// (R5r): one GET /containers/{id}/stats?stream=0, which the Engine
// answers with its next sample and the one before it (about a second
// apart), a read a socket proxy allows with the other container reads.
func (x *Actions) CPU(ctx context.Context, id string, labels map[string]string) (standby.CPUSample, error) {
	var sample standby.CPUSample
	if _, ok := labels[catalog.LabelStandbyCPU]; !ok {
		return sample, fmt.Errorf("docker %s: stats %s: %w", x.a.host, shortID(id), ErrNoStandbyCPU)
	}
	err := x.call("stats", id, func(cli *client.Client) error {
		res, err := cli.ContainerStats(ctx, id, false)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var st container.StatsResponse
		if err := json.NewDecoder(io.LimitReader(res.Body, maxStatsBytes)).Decode(&st); err != nil {
			return fmt.Errorf("reading the stats: %w", err)
		}
		if st.Read.IsZero() {
			return errors.New("the stats have no time: the container is not running")
		}
		sample = standby.CPUSample{Used: time.Duration(st.CPUStats.CPUUsage.TotalUsage), At: st.Read,
			PrevUsed: time.Duration(st.PreCPUStats.CPUUsage.TotalUsage)}
		if !st.PreRead.IsZero() && st.PreRead.Year() > 1 && st.PreCPUStats.CPUUsage.TotalUsage > 0 {
			sample.PrevAt = st.PreRead
		}
		return nil
	})
	return sample, err
}
