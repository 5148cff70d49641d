//go:build unix

package dicertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// The control surface lets a person drive a Host by hand, as the dicer CLI
// drives a real daemon: run, stop, start, standby and remove instances. It
// is HTTP with JSON bodies on a unix socket of its own, next to the gRPC
// one, because Dicer's API as this package serves it is what Caddy reads
// (it has no CreateInstance, and its Start/Stop/Standby change the record
// alone, not a Host's processes).
//
//	POST   /instances               RunRequest -> the recorded instance (201)
//	POST   /instances/{name}/start  -> the recorded instance (also stop, standby)
//	DELETE /instances/{name}        -> 204
//
// An error answers 400 (bad request), 404 (no such instance) or 409 (the
// instance is not in a state the verb applies to), with the reason as text.

const (
	// DefaultInstancePort is the port a run instance serves on when its
	// RunRequest names none: the port of the example's routes.
	DefaultInstancePort = 8080
	// firstRunHost and lastRunHost bound the 127.0.0.N addresses given to
	// run instances that name no IP (the example's own use .11 to .22).
	firstRunHost, lastRunHost = 100, 254
	// maxControlBody bounds a control request's body.
	maxControlBody = 64 << 10
)

// RunRequest is what `dicer-testd run` asks for.
type RunRequest struct {
	// Name names the instance (required, unique).
	Name string `json:"name"`
	// Labels are the instance's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// IP is the instance's address, in 127.0.0.0/8. Default: the first of
	// 127.0.0.100 to 127.0.0.254 that no instance of the Daemon has.
	IP string `json:"ip,omitempty"`
	// Port is the port its HTTP service listens on. Default 8080.
	Port int `json:"port,omitempty"`
	// StandbyAfter, if set, is recorded as standby_after, and the port is
	// published on a free port of the Host's gateway: a connection there
	// wakes the instance from standby. Control never puts an instance on
	// standby by itself; Standby does, as if it had been idle that long.
	StandbyAfter time.Duration `json:"standby_after,omitempty"`
	// Health gives the instance an HTTP health check on Port; Control
	// reports it healthy once its process serves.
	Health bool `json:"health,omitempty"`
}

// Control drives a Host on behalf of a person. Create it with NewControl.
type Control struct {
	h *Host
	// Logf, if set, is told each change made (like log.Printf).
	Logf func(format string, args ...any)
}

// NewControl returns a Control of h.
func NewControl(h *Host) *Control { return &Control{h: h} }

// errNotFound and errBadRequest classify a Control error for its HTTP
// status; anything else is a state conflict.
var (
	errNotFound   = errors.New("no such instance")
	errBadRequest = errors.New("bad request")
)

// Run creates and starts an instance as req says and returns what is
// recorded.
func (c *Control) Run(req RunRequest) (*dicerpb.Instance, error) {
	spec, err := c.spec(req)
	if err != nil {
		return nil, err
	}
	if _, err := c.h.Run(spec); err != nil {
		return nil, err
	}
	c.markHealthy(spec.Name)
	c.logf("instance %s: %s", spec.Name, Describe(c.h.d.Instance(spec.Name)))
	return c.h.d.Instance(spec.Name), nil
}

// Start starts or resumes the instance (Host.Start).
func (c *Control) Start(name string) (*dicerpb.Instance, error) {
	return c.act(name, func() error {
		if err := c.h.Start(name); err != nil {
			return err
		}
		c.markHealthy(name)
		return nil
	})
}

// Stop stops the instance (Host.Stop).
func (c *Control) Stop(name string) (*dicerpb.Instance, error) {
	return c.act(name, func() error { return c.h.Stop(name) })
}

// Standby puts the instance on standby (Host.Standby).
func (c *Control) Standby(name string) (*dicerpb.Instance, error) {
	return c.act(name, func() error { return c.h.Standby(name) })
}

// Remove deletes the instance (Host.Delete).
func (c *Control) Remove(name string) error {
	_, err := c.act(name, func() error { return c.h.Delete(name) })
	return err
}

func (c *Control) act(name string, do func() error) (*dicerpb.Instance, error) {
	if c.h.lookup(name) == nil {
		return nil, fmt.Errorf("%w: %q", errNotFound, name)
	}
	if err := do(); err != nil {
		return nil, err
	}
	inst := c.h.d.Instance(name)
	if inst == nil {
		c.logf("instance %s: removed", name)
	} else {
		c.logf("instance %s: %s", name, Describe(inst))
	}
	return inst, nil
}

// markHealthy reports a running instance with a health check healthy: its
// process serves once Host.Run or Host.Start returns.
func (c *Control) markHealthy(name string) {
	inst := c.h.d.Instance(name)
	if inst.GetHealthCheck() != nil && inst.GetState() == dicerpb.InstanceState_INSTANCE_STATE_RUNNING {
		c.h.d.SetHealth(name, dicerpb.HealthStatus_HEALTH_STATUS_HEALTHY)
	}
}

func (c *Control) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// spec checks req and fills in its defaults.
func (c *Control) spec(req RunRequest) (InstanceSpec, error) {
	bad := func(format string, args ...any) (InstanceSpec, error) {
		return InstanceSpec{}, fmt.Errorf("%w: %s", errBadRequest, fmt.Sprintf(format, args...))
	}
	if req.Name == "" {
		return bad("an instance needs a name")
	}
	if len(req.Name) > 63 || strings.ContainsFunc(req.Name, func(r rune) bool {
		return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '_' || r == '.')
	}) {
		return bad("name %q: use up to 63 letters, digits, '-', '_' and '.'", req.Name)
	}
	if req.Port == 0 {
		req.Port = DefaultInstancePort
	}
	if req.Port < 1 || req.Port > 65535 {
		return bad("port %d is out of range", req.Port)
	}
	if req.StandbyAfter < 0 {
		return bad("standby_after %s is negative", req.StandbyAfter)
	}
	if c.h.d.Instance(req.Name) != nil {
		return InstanceSpec{}, fmt.Errorf("instance %q exists", req.Name)
	}
	used := c.usedIPs()
	if req.IP == "" {
		ip, err := freeRunIP(used)
		if err != nil {
			return bad("%v", err)
		}
		req.IP = ip
	}
	if ip := net.ParseIP(req.IP); ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return bad("ip %q is not in 127.0.0.0/8", req.IP)
	}
	if other := used[req.IP]; other != "" {
		return InstanceSpec{}, fmt.Errorf("ip %s is instance %q's", req.IP, other)
	}
	spec := InstanceSpec{Name: req.Name, IP: req.IP, Port: req.Port, Labels: req.Labels, StandbyAfter: req.StandbyAfter}
	if req.StandbyAfter > 0 {
		spec.Publish = []*dicerpb.PortMapping{{GuestPort: uint32(req.Port), Protocol: dicerpb.Protocol_PROTOCOL_TCP}}
	}
	if req.Health {
		spec.HealthCheck = &dicerpb.HealthCheck{
			Probe: &dicerpb.HealthCheck_Http{Http: &dicerpb.HealthCheckHTTP{Port: uint32(req.Port), Path: "/"}},
		}
	}
	return spec, nil
}

// usedIPs maps the addresses of the Daemon's instances to their names.
func (c *Control) usedIPs() map[string]string {
	d := c.h.d
	d.mu.Lock()
	defer d.mu.Unlock()
	used := make(map[string]string, len(d.instances))
	for _, inst := range d.instances {
		if inst.GetIp() != "" {
			used[inst.GetIp()] = inst.GetName()
		}
	}
	return used
}

// freeRunIP returns the first address from 127.0.0.100 to 127.0.0.254 not
// in used.
func freeRunIP(used map[string]string) (string, error) {
	for n := firstRunHost; n <= lastRunHost; n++ {
		if ip := "127.0.0." + strconv.Itoa(n); used[ip] == "" {
			return ip, nil
		}
	}
	return "", fmt.Errorf("every address from 127.0.0.%d to 127.0.0.%d is taken: give one with ip", firstRunHost, lastRunHost)
}

// Describe says in one line where an instance is and how it is reached,
// e.g. "running at 127.0.0.100, port 8080 published on host port 40123,
// standby after 1m0s".
func Describe(inst *dicerpb.Instance) string {
	if inst == nil {
		return "gone"
	}
	parts := []string{StateName(inst.GetState())}
	if inst.GetIp() != "" {
		parts[0] += " at " + inst.GetIp()
	}
	for _, p := range inst.GetPorts() {
		where := "host port " + strconv.Itoa(int(p.GetHostPort()))
		if p.GetHostIp() != "" {
			where = net.JoinHostPort(p.GetHostIp(), strconv.Itoa(int(p.GetHostPort())))
		}
		parts = append(parts, fmt.Sprintf("port %d published on %s", p.GetGuestPort(), where))
	}
	if sa := inst.GetStandbyAfter(); sa != nil {
		parts = append(parts, "standby after "+sa.AsDuration().String())
	}
	if h := inst.GetHealth(); h != nil {
		parts = append(parts, "health "+strings.ToLower(strings.TrimPrefix(h.GetStatus().String(), "HEALTH_STATUS_")))
	}
	return strings.Join(parts, ", ")
}

// StateName says a state in words: "running", "on standby", ...
func StateName(s dicerpb.InstanceState) string { return stateWord(s) }

// ---- HTTP -------------------------------------------------------------------

// Handler serves the control surface.
func (c *Control) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /instances", func(w http.ResponseWriter, r *http.Request) {
		var req RunRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
			return
		}
		inst, err := c.Run(req)
		writeInstance(w, inst, err, http.StatusCreated)
	})
	verbs := map[string]func(string) (*dicerpb.Instance, error){"start": c.Start, "stop": c.Stop, "standby": c.Standby}
	mux.HandleFunc("POST /instances/{name}/{verb}", func(w http.ResponseWriter, r *http.Request) {
		do, ok := verbs[r.PathValue("verb")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		inst, err := do(r.PathValue("name"))
		writeInstance(w, inst, err, http.StatusOK)
	})
	mux.HandleFunc("DELETE /instances/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Remove(r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

func writeInstance(w http.ResponseWriter, inst *dicerpb.Instance, err error, code int) {
	if err != nil {
		writeError(w, err)
		return
	}
	b, err := protojson.Marshal(inst)
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusConflict
	switch {
	case errors.Is(err, errNotFound):
		code = http.StatusNotFound
	case errors.Is(err, errBadRequest):
		code = http.StatusBadRequest
	}
	http.Error(w, strings.TrimPrefix(err.Error(), "dicertest: "), code)
}

// ServeControl serves c on a unix socket at path (a stale socket there is
// removed), which only its owner may use, until stop is called, which also
// removes the socket.
func ServeControl(c *Control, path string) (stop func(), err error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("dicertest: control socket: %w", err)
	}
	// Only its owner may run processes through it.
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("dicertest: control socket: %w", err)
	}
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return func() {
		_ = srv.Close()
		<-done
	}, nil
}

// ---- Client -----------------------------------------------------------------

// ControlClient talks to a control socket.
type ControlClient struct {
	path string
	hc   *http.Client
}

// NewControlClient returns a client of the control socket at path. It
// connects at each call.
func NewControlClient(path string) *ControlClient {
	return &ControlClient{path: path, hc: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
		DisableKeepAlives: true,
	}}}
}

// Run asks for an instance as req says and returns what is recorded.
func (cc *ControlClient) Run(ctx context.Context, req RunRequest) (*dicerpb.Instance, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return cc.instance(ctx, http.MethodPost, "/instances", body)
}

// Do applies verb (start, stop or standby) to the instance named name and
// returns what is recorded.
func (cc *ControlClient) Do(ctx context.Context, verb, name string) (*dicerpb.Instance, error) {
	return cc.instance(ctx, http.MethodPost, "/instances/"+pathName(name)+"/"+verb, nil)
}

// Remove deletes the instance named name.
func (cc *ControlClient) Remove(ctx context.Context, name string) error {
	_, err := cc.call(ctx, http.MethodDelete, "/instances/"+pathName(name), nil)
	return err
}

func (cc *ControlClient) instance(ctx context.Context, method, path string, body []byte) (*dicerpb.Instance, error) {
	b, err := cc.call(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	inst := &dicerpb.Instance{}
	if err := protojson.Unmarshal(b, inst); err != nil {
		return nil, fmt.Errorf("control socket %s: bad answer: %w", cc.path, err)
	}
	return inst, nil
}

func (cc *ControlClient) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://dicer-testd"+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := cc.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("no test daemon answers on %s (is `make example` running?): %w", cc.path, errors.Unwrap(err))
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxControlBody))
	if err != nil {
		return nil, err
	}
	if res.StatusCode/100 != 2 {
		return nil, errors.New(strings.TrimSpace(string(b)))
	}
	return b, nil
}

// pathName escapes name as one path segment.
func pathName(name string) string { return url.PathEscape(name) }
