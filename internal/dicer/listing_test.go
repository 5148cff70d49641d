package dicer

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/caddy-dicer/caddy-dicer/internal/catalog"
	"github.com/caddy-dicer/caddy-dicer/internal/dicerpb"
)

// R6: the listing, decoded one instance at a time (listing.go), gives the
// instances a whole ListInstancesResponse decoded by proto.Unmarshal
// gives, in order, each with its own labels; a reply cut short is an
// error, and the codec takes no other message.
func TestListing_R6_decoded_one_at_a_time_as_whole(t *testing.T) {
	resp := &dicerpb.ListInstancesResponse{}
	for i := range 5 {
		name := fmt.Sprintf("web-%d", i)
		in := &dicerpb.Instance{
			Id: fmt.Sprintf("%032x", i+1), Name: name, Hostname: name, NetworkName: "default",
			Ip:    fmt.Sprintf("10.213.0.%d", i+2),
			State: dicerpb.InstanceState_INSTANCE_STATE_RUNNING,
			Ports: []*dicerpb.PortMapping{{HostPort: uint32(20000 + i), GuestPort: 8080, Protocol: dicerpb.Protocol_PROTOCOL_TCP}},
		}
		if i != 2 { // one without labels
			in.Labels = map[string]string{"caddy.host": name + ".example.com", "app": "web"}
		}
		if i == 3 {
			in.StandbyAfter = durationpb.New(10 * time.Minute)
			in.State = dicerpb.InstanceState_INSTANCE_STATE_STANDBY
		}
		resp.Instances = append(resp.Instances, in)
	}
	wire, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	wire = protowire.AppendTag(wire, 99, protowire.VarintType) // a field this build does not know
	wire = protowire.AppendVarint(wire, 7)

	whole := &dicerpb.ListInstancesResponse{}
	if err := proto.Unmarshal(wire, whole); err != nil {
		t.Fatal(err)
	}
	gateways := map[string]string{"default": "10.213.0.1"}
	var want []catalog.Instance
	for _, in := range whole.GetInstances() {
		want = append(want, translate(in, gateways))
	}

	var got []catalog.Instance
	counted := -1
	r := &listingReply{count: func(n int) { counted = n }, in: new(dicerpb.Instance),
		each: func(in *dicerpb.Instance) { got = append(got, translateListed(in, gateways)) }}
	if err := (listingCodec{}).Unmarshal(wire, r); err != nil {
		t.Fatal(err)
	}
	if counted != len(want) || !reflect.DeepEqual(got, want) {
		t.Fatalf("one at a time: count %d, %+v;\nwhole: %+v", counted, got, want)
	}
	got[0].Labels["app"] = "changed"
	if got[1].Labels["app"] != "web" {
		t.Error("two listed instances share a labels map")
	}

	r = &listingReply{count: func(int) {}, in: new(dicerpb.Instance), each: func(*dicerpb.Instance) {}}
	if err := (listingCodec{}).Unmarshal(wire[:len(wire)/2], r); err == nil {
		t.Error("a reply cut short decoded without an error")
	}
	if err := (listingCodec{}).Unmarshal(wire, whole); err == nil {
		t.Error("the codec decoded into a message other than a listingReply")
	}
	if _, err := (listingCodec{}).Marshal(whole); err == nil {
		t.Error("the codec encoded a message other than a ListInstancesRequest")
	}
}
