package dicertest

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// service implements dicerpb.DaemonServiceServer on a Daemon.
type service struct {
	dicerpb.UnimplementedDaemonServiceServer
	d *Daemon
}

func (s *service) ListInstances(context.Context, *dicerpb.ListInstancesRequest) (*dicerpb.ListInstancesResponse, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	out := &dicerpb.ListInstancesResponse{Instances: make([]*dicerpb.Instance, 0, len(d.instances))}
	for _, inst := range d.instances {
		out.Instances = append(out.Instances, proto.Clone(inst).(*dicerpb.Instance))
	}
	return out, nil
}

func (s *service) GetInstance(_ context.Context, req *dicerpb.GetInstanceRequest) (*dicerpb.Instance, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	inst, err := d.lookupLocked(req.GetName())
	if err != nil {
		return nil, err
	}
	out := proto.Clone(inst).(*dicerpb.Instance)
	if d.getAnswer != nil {
		out = d.getAnswer(out)
	}
	return out, nil
}

func (s *service) StartInstance(_ context.Context, req *dicerpb.StartInstanceRequest) (*dicerpb.Instance, error) {
	return s.transition(req.GetName(), dicerpb.InstanceState_INSTANCE_STATE_RUNNING, func(from dicerpb.InstanceState) bool {
		switch from {
		case dicerpb.InstanceState_INSTANCE_STATE_STOPPED,
			dicerpb.InstanceState_INSTANCE_STATE_FAILED,
			dicerpb.InstanceState_INSTANCE_STATE_STANDBY:
			return true
		}
		return false
	})
}

func (s *service) StandbyInstance(_ context.Context, req *dicerpb.StandbyInstanceRequest) (*dicerpb.Instance, error) {
	return s.transition(req.GetName(), dicerpb.InstanceState_INSTANCE_STATE_STANDBY, func(from dicerpb.InstanceState) bool {
		return from == dicerpb.InstanceState_INSTANCE_STATE_RUNNING || from == dicerpb.InstanceState_INSTANCE_STATE_PAUSED
	})
}

func (s *service) StopInstance(_ context.Context, req *dicerpb.StopInstanceRequest) (*dicerpb.Instance, error) {
	return s.transition(req.GetName(), dicerpb.InstanceState_INSTANCE_STATE_STOPPED, func(from dicerpb.InstanceState) bool {
		return from != dicerpb.InstanceState_INSTANCE_STATE_STOPPED
	})
}

func (s *service) transition(name string, to dicerpb.InstanceState, allowed func(dicerpb.InstanceState) bool) (*dicerpb.Instance, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	inst, err := d.lookupLocked(name)
	if err != nil {
		return nil, err
	}
	if !allowed(inst.State) {
		return nil, status.Errorf(codes.FailedPrecondition, "instance %q is %s", inst.Name, stateWord(inst.State))
	}
	d.setStateLocked(inst, to, nil)
	return proto.Clone(inst).(*dicerpb.Instance), nil
}

func (d *Daemon) lookupLocked(name string) (*dicerpb.Instance, error) {
	if name == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	inst := d.findLocked(name)
	if inst == nil {
		return nil, status.Errorf(codes.NotFound, "instance %q not found", name)
	}
	return inst, nil
}

func stateWord(s dicerpb.InstanceState) string {
	switch s {
	case dicerpb.InstanceState_INSTANCE_STATE_STOPPED:
		return "stopped"
	case dicerpb.InstanceState_INSTANCE_STATE_STARTING:
		return "starting"
	case dicerpb.InstanceState_INSTANCE_STATE_RUNNING:
		return "running"
	case dicerpb.InstanceState_INSTANCE_STATE_PAUSED:
		return "paused"
	case dicerpb.InstanceState_INSTANCE_STATE_STOPPING:
		return "stopping"
	case dicerpb.InstanceState_INSTANCE_STATE_RESTARTING:
		return "restarting"
	case dicerpb.InstanceState_INSTANCE_STATE_FAILED:
		return "failed"
	case dicerpb.InstanceState_INSTANCE_STATE_STANDBY:
		return "on standby"
	}
	return "in state " + s.String()
}

func (s *service) ListNetworks(context.Context, *dicerpb.ListNetworksRequest) (*dicerpb.ListNetworksResponse, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	out := &dicerpb.ListNetworksResponse{Networks: make([]*dicerpb.Network, 0, len(d.networks))}
	for _, n := range d.networks {
		out.Networks = append(out.Networks, proto.Clone(n).(*dicerpb.Network))
	}
	return out, nil
}

func (s *service) GetNetwork(_ context.Context, req *dicerpb.GetNetworkRequest) (*dicerpb.Network, error) {
	d := s.d
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name is required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.findNetworkLocked(req.GetName())
	if n == nil {
		return nil, status.Errorf(codes.NotFound, "network %q not found", req.GetName())
	}
	return proto.Clone(n).(*dicerpb.Network), nil
}

func (s *service) GetHostInfo(ctx context.Context, _ *dicerpb.GetHostInfoRequest) (*dicerpb.GetHostInfoResponse, error) {
	d := s.d
	out := &dicerpb.GetHostInfoResponse{
		Version:  Version,
		Hostname: d.hostname,
		Hypervisors: []*dicerpb.HypervisorInfo{{
			Type:      dicerpb.HypervisorType_HYPERVISOR_TYPE_CLOUD_HYPERVISOR,
			Versions:  []string{"dicertest"},
			IsDefault: true,
		}},
	}
	out.Token, _ = ctx.Value(tokenNameKey{}).(string)
	d.mu.Lock()
	if d.listenAddr != "" {
		out.ListenerAddresses = []string{d.listenAddr}
		out.Fingerprint = d.fingerprint
	}
	d.mu.Unlock()
	return out, nil
}

func (s *service) GetEvents(req *dicerpb.GetEventsRequest, stream grpc.ServerStreamingServer[dicerpb.GetEventsResponse]) error {
	d := s.d
	if req.GetLimit() < 0 {
		return status.Error(codes.InvalidArgument, "limit must not be negative")
	}
	f := filter{kind: req.GetKind(), id: req.GetId(), name: req.GetName()}
	if req.GetSince() != nil {
		if err := req.GetSince().CheckValid(); err != nil {
			return status.Errorf(codes.InvalidArgument, "invalid since: %v", err)
		}
		f.since = req.GetSince().AsTime()
	}

	// Subscribe before reading the history, under one lock hold, so an
	// event is either in the history read or delivered to the subscriber.
	d.mu.Lock()
	var sub *subscriber
	if req.GetFollow() {
		sub = d.subscribeLocked(f)
	}
	hist := d.historyLocked(f, int(req.GetLimit()))
	noCaughtUp := d.noCaughtUp
	d.mu.Unlock()
	if sub != nil {
		defer d.unsubscribe(sub)
	}

	for first := true; first && !noCaughtUp || len(hist) > 0; first = false {
		n := min(len(hist), HistoryBatch)
		resp := &dicerpb.GetEventsResponse{Events: hist[:n], CaughtUp: n == len(hist) && !noCaughtUp}
		hist = hist[n:]
		if err := stream.Send(resp); err != nil {
			return nil // the client went away
		}
	}
	if sub == nil {
		return nil
	}

	ctx := stream.Context()
	for {
		select {
		case <-sub.cut:
			return errFellBehind
		case <-ctx.Done():
			return nil
		default:
		}
		select {
		case ev := <-sub.ch:
			if err := stream.Send(&dicerpb.GetEventsResponse{Events: []*dicerpb.Event{ev}}); err != nil {
				return nil
			}
		case <-sub.cut:
			return errFellBehind
		case <-ctx.Done():
			return nil
		}
	}
}

var errFellBehind = status.Error(codes.ResourceExhausted, "fell behind, subscribe again")
