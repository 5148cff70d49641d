package dicer

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// A ListInstances reply holds every instance at once: decoded whole, a
// catalog of 50,000 instances costs Caddy 50,000 daemon messages (about
// 1 KB each, more with the contents of FILE mounts) on top of the
// translated instances, for the moment of the listing, and Caddy's
// resident memory keeps that peak (issue 43). listInstances decodes the
// reply's instances one at a time into one message, and hands each to its
// caller before the next: what the listing keeps is what the caller keeps
// of each. The reply is the same ListInstances call, on the same
// connection, with the same protobuf encoding; only its decoding differs.

// errNotListing is returned by listingCodec for a message that is not one
// of the ListInstances call.
var errNotListing = errors.New("the listing codec encodes a ListInstancesRequest and decodes a ListInstancesResponse only")

// listingCodec is the protobuf codec of the ListInstances call (it is
// named "proto", as gRPC's own, so the daemon sees the same call): it
// encodes the request as protobuf does, and decodes the reply into a
// listingReply, one instance at a time.
type listingCodec struct{}

func (listingCodec) Name() string { return "proto" }

func (listingCodec) Marshal(v any) ([]byte, error) {
	req, ok := v.(*dicerpb.ListInstancesRequest)
	if !ok {
		return nil, errNotListing
	}
	return proto.Marshal(req)
}

func (listingCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*listingReply)
	if !ok {
		return errNotListing
	}
	return r.decode(data)
}

// listingReply receives a ListInstancesResponse's instances: first their
// number (count), then each, one at a time, each in the same message: it
// is each's until each returns, then reset, but for its labels, which
// each may take (the next one gets a map of its own).
type listingReply struct {
	count func(n int)
	each  func(in *dicerpb.Instance)
	in    *dicerpb.Instance
}

// decode reads a ListInstancesResponse: field 1, repeated Instance, is
// decoded as proto.Unmarshal decodes it (every other field skipped).
func (r *listingReply) decode(b []byte) error {
	n, err := instanceCount(b)
	if err != nil {
		return err
	}
	r.count(n)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("ListInstancesResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return fmt.Errorf("ListInstancesResponse: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		msg, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("ListInstancesResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if err := proto.Unmarshal(msg, r.in); err != nil {
			return fmt.Errorf("ListInstancesResponse: %w", err)
		}
		r.each(r.in)
	}
	return nil
}

// instanceCount is the number of instances in a ListInstancesResponse.
func instanceCount(b []byte) (int, error) {
	count := 0
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return 0, fmt.Errorf("ListInstancesResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return 0, fmt.Errorf("ListInstancesResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == 1 && typ == protowire.BytesType {
			count++
		}
	}
	return count, nil
}

// translateListed is translate for an instance of a listingReply: it
// takes the message's labels over instead of copying them (the message is
// decoded into anew, with a map of its own, for the next instance).
func translateListed(in *dicerpb.Instance, gateways map[string]string) catalog.Instance {
	labels := in.Labels
	in.Labels = nil
	out := translate(in, gateways)
	if len(labels) > 0 {
		out.Labels = labels
	}
	return out
}

// listInstances calls ListInstances on cc, tells count the number of
// instances of the reply, then hands each of them to each, in the
// reply's order (see listingReply); it returns the call's error.
func listInstances(ctx context.Context, cc grpc.ClientConnInterface, count func(n int), each func(in *dicerpb.Instance)) error {
	r := &listingReply{count: count, each: each, in: new(dicerpb.Instance)}
	return cc.Invoke(ctx, dicerpb.DaemonService_ListInstances_FullMethodName, &dicerpb.ListInstancesRequest{}, r,
		grpc.StaticMethod(), grpc.ForceCodec(listingCodec{}))
}
