// Command dicer-testd runs the in-memory test daemon of package dicertest
// by hand, for trying caddy-dicer without KVM. It serves the Dicer gRPC API
// on a unix socket (and optionally over TLS on TCP), and for each instance
// listed in -instances it runs a tiny HTTP server on the instance's
// loopback address that answers "hello from <name>".
//
//	dicer-testd -socket ./dicer-testd.sock -listen 127.0.0.1:7443 -instances instances.json
//
// instances.json:
//
//	[{"name":"web-1","labels":{"app":"web","caddy.host":"localhost"},"ip":"127.0.0.11","port":8080,"health":false}]
//
// With "health": true the instance gets an HTTP health check on its port and
// is reported healthy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
	"github.com/caddy-dicer/caddy-dicer/internal/dicertest"
)

type instanceSpec struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	IP     string            `json:"ip"`
	Port   int               `json:"port"`
	Health bool              `json:"health"`
}

func main() {
	socket := flag.String("socket", "./dicer-testd.sock", "unix socket `path` to serve on (plaintext, no auth)")
	listen := flag.String("listen", "", "optional TCP `address` to serve on with TLS and tokens, e.g. 127.0.0.1:7443")
	instances := flag.String("instances", "", "JSON `file` listing instances to run (name, labels, ip in 127.0.0.0/8, port, health)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("dicer-testd: ")
	if err := run(*socket, *listen, *instances); err != nil {
		log.Fatal(err)
	}
}

func run(socket, listen, instancesFile string) error {
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	var specs []instanceSpec
	if instancesFile != "" {
		data, err := os.ReadFile(instancesFile)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &specs); err != nil {
			return fmt.Errorf("%s: %w", instancesFile, err)
		}
	}

	d := dicertest.New()
	defer d.Close()

	var stops []func()
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	for i, s := range specs {
		if err := s.check(); err != nil {
			return fmt.Errorf("%s: instance %d: %w", instancesFile, i+1, err)
		}
		addr := net.JoinHostPort(s.IP, strconv.Itoa(s.Port))
		stop, err := dicertest.ServeHello(addr, s.Name)
		if err != nil {
			return fmt.Errorf("instance %s: %w", s.Name, err)
		}
		stops = append(stops, stop)
		inst := &dicerpb.Instance{
			Name:     s.Name,
			Hostname: s.Name,
			Labels:   s.Labels,
			Ip:       s.IP,
			State:    dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
		}
		if s.Health {
			inst.HealthCheck = &dicerpb.HealthCheck{
				Probe: &dicerpb.HealthCheck_Http{Http: &dicerpb.HealthCheckHTTP{Port: uint32(s.Port), Path: "/"}},
			}
		}
		d.CreateInstance(inst)
		if s.Health {
			d.SetHealth(s.Name, dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY)
		}
		log.Printf("instance %s: serving http://%s/ (labels %v)", s.Name, addr, s.Labels)
	}

	if err := d.ServeUnix(socket); err != nil {
		return err
	}
	log.Printf("serving the Dicer API on unix://%s", socket)
	if listen != "" {
		addr, err := d.ServeTCP(listen)
		if err != nil {
			return err
		}
		log.Printf("serving the Dicer API over TLS on %s", addr)
		fmt.Printf("token: %s\n", d.AddToken("caddy"))
		fmt.Printf("fingerprint: %s\n", d.Fingerprint())
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	log.Print("shutting down")
	return nil
}

func (s instanceSpec) check() error {
	if s.Name == "" {
		return errors.New("no name")
	}
	ip := net.ParseIP(s.IP)
	if ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return fmt.Errorf("ip %q is not in 127.0.0.0/8", s.IP)
	}
	if s.Port < 1 || s.Port > 65535 {
		return fmt.Errorf("port %d out of range", s.Port)
	}
	return nil
}
