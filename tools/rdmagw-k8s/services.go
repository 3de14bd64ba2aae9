// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/netip"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The services file: what the agent writes and the sidecars of its node read
// (docs/kubernetes.md, "The services file"). Deterministic: the same objects
// give the same bytes, so an event that changes nothing a sidecar uses
// rewrites nothing.
const FileFormat = "rdmagw-services/1"

type File struct {
	Format string `json:"format"`
	// Whether the agent can reach the API server now, and since when: a
	// sidecar keeps the last services it read either way, and says which.
	API APIStatus `json:"api"`
	// The nodes whose node-mode rdmagw accepts tunnels, by name: a
	// sidecar reaches an endpoint without a sidecar of its own through the
	// rdmagw of the endpoint's node (Endpoint.Node), when it has one.
	Nodes    []Node    `json:"nodes"`
	Services []Service `json:"services"`
}

type APIStatus struct {
	Reachable bool   `json:"reachable"`
	Since     string `json:"since"` // RFC 3339, UTC
	Error     string `json:"error,omitempty"`
}

type Node struct {
	Name   string `json:"name"`
	Tunnel string `json:"tunnel"` // IPv4 or IPv6: where the node's rdmagw accepts tunnels
}

type Service struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// IPv4 and IPv6 ClusterIPs, in the Service's order (a dual-stack
	// Service's primary family first); none for a headless Service, whose
	// clients connect to the endpoints' addresses themselves, nor for one
	// whose every ClusterIP was refused (refusal).
	ClusterIPs []string `json:"cluster_ips"`
	Ports      []Port   `json:"ports"`
}

type Port struct {
	Name string `json:"name,omitempty"`
	Port int32  `json:"port"`
	// Every endpoint the EndpointSlices list for this port, whatever its
	// state: a sidecar sends new streams to the ready ones only, and shows
	// the rest.
	Endpoints []Endpoint `json:"endpoints"`
}

// An endpoint's condition, from EndpointSlice's conditions.
const (
	StateReady       = "ready"
	StateTerminating = "terminating"
	StateNotReady    = "not-ready"
)

type Endpoint struct {
	// IPv4 or IPv6, as netip writes it: a v4-mapped IPv6 address as the
	// IPv4 address it holds, so that one address has one text.
	Address string `json:"address"`
	Port    int32  `json:"port"` // the target port, named ports resolved
	State   string `json:"state"`
	Node    string `json:"node,omitempty"`
	Pod     string `json:"pod,omitempty"`
	// The pod carries the label SidecarLabel: rdmagw-inject gave it a
	// sidecar, which accepts tunnels at the pod's address.
	Rdmagw bool `json:"rdmagw"`
}

// SidecarLabel marks a pod that rdmagw-inject gave a sidecar.
const SidecarLabel = "rdmagw.io/sidecar"

// NodeModeLabel marks a node that runs a node-mode rdmagw (any value). A
// label, not an annotation: the agent asks the API server for the nodes
// that carry it only, so that it holds a few nodes, not the cluster's
// every one, and a Node's updates (its status, every few seconds) reach it
// only for those.
const NodeModeLabel = "rdmagw.io/node-mode"

// TunnelAnnotation is where a node-mode rdmagw accepts tunnels, IPv4 or
// IPv6, when that is not the InternalIP BuildNodes would choose (an RDMA
// interface on another network, say). An annotation: an address is no
// selector.
const TunnelAnnotation = "rdmagw.io/tunnel-address"

// refusal says why an address may not be written as a ClusterIP or an
// endpoint, or "" when it may. A sidecar sends a Service's connections to
// its endpoints and takes the connections to its ClusterIPs: an endpoint at
// 127.0.0.1 would land every client's connections on the client's own
// loopback (its sidecar's admin port, say), a ClusterIP of 127.0.0.1 would
// capture the pod's connections to its own loopback. None of these is an
// address a pod or a Service can have; whoever wrote one into an
// EndpointSlice or a Service is not to be followed. A v4-mapped IPv6
// address is judged as the IPv4 address it holds.
func refusal(addr netip.Addr) string {
	if addr.Zone() != "" {
		// fe80::1%eth0 names an interface of whoever wrote it, and neither
		// rdmagw's reader nor the table (16 bytes) holds a zone. The API
		// server refuses one in a Service or an EndpointSlice; an
		// annotation is any text.
		return "zone"
	}
	addr = addr.Unmap()
	switch {
	case addr.IsLoopback():
		return "loopback"
	case addr.IsUnspecified(), addr.Is4() && addr.As4()[0] == 0:
		// 0.0.0.0/8 is "this network": as the unspecified address, it
		// lands on the host that connects (rdmagw's parser refuses it too).
		return "unspecified"
	case addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return "broadcast"
	case addr.IsLinkLocalUnicast():
		return "link-local"
	case addr.IsLinkLocalMulticast():
		return "link-local-multicast"
	case addr.IsInterfaceLocalMulticast():
		return "interface-local-multicast"
	case addr.IsMulticast():
		return "multicast"
	}
	return ""
}

// Refused is an address BuildServices or BuildNodes left out of the file,
// and the object (and version of it) that listed it.
type Refused struct {
	Resource        string // "services", "endpointslices" or "nodes", as the API names them
	Namespace, Name string
	ResourceVersion string
	Address         string
	Reason          string // refusal's
}

// refusals collects Refused, each once.
type refusals map[Refused]struct{}

func (r refusals) add(resource string, object metav1.Object, address netip.Addr, reason string) {
	r.addText(resource, object, address.String(), reason)
}

// addText is add for an address that is not one: text that does not
// parse, or none at all ("").
func (r refusals) addText(resource string, object metav1.Object, address, reason string) {
	r[Refused{Resource: resource, Namespace: object.GetNamespace(), Name: object.GetName(),
		ResourceVersion: object.GetResourceVersion(), Address: address, Reason: reason}] = struct{}{}
}

// sorted lists them in a fixed order: by resource, namespace, name, version,
// address.
func (r refusals) sorted() []Refused {
	out := make([]Refused, 0, len(r))
	for x := range r {
		out = append(out, x)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.ResourceVersion != b.ResourceVersion {
			return a.ResourceVersion < b.ResourceVersion
		}
		return a.Address < b.Address
	})
	return out
}

// refusalLog logs each Refused once per version of the object that listed
// it: the file is built again on every change anywhere in the cluster, and
// one bad object must not log a line each time.
type refusalLog struct {
	mu     sync.Mutex
	logged map[Refused]bool // the refusals of the last build
	write  func(Refused)    // nil: logEvent
}

// report logs the refusals of one build that the last build did not have:
// new ones, and old ones of an object's new version. It returns them.
func (l *refusalLog) report(refused []Refused) []Refused {
	l.mu.Lock()
	defer l.mu.Unlock()
	current := make(map[Refused]bool, len(refused))
	var fresh []Refused
	for _, r := range refused {
		current[r] = true
		if l.logged[r] {
			continue
		}
		fresh = append(fresh, r)
		if l.write != nil {
			l.write(r)
		} else {
			logEvent("warn", "address_refused", "resource", r.Resource, "namespace", r.Namespace, "name", r.Name,
				"resource_version", r.ResourceVersion, "address", r.Address, "reason", r.Reason)
		}
	}
	// Only the last build's: what a deleted or updated object listed goes.
	l.logged = current
	return fresh
}

// BuildServices turns the API's objects into the file's services. sidecarPods
// holds "namespace/name" of the pods that carry SidecarLabel. The ClusterIPs
// and endpoint addresses that refusal refuses are left out (a Service whose
// every ClusterIP is refused is written with none, as a headless one), and
// listed in the second result, each once.
func BuildServices(services []*corev1.Service, slices []*discoveryv1.EndpointSlice,
	sidecarPods map[string]bool) ([]Service, []Refused) {
	refused := refusals{}
	byService := map[string][]*discoveryv1.EndpointSlice{}
	for _, slice := range slices {
		owner := slice.Labels[discoveryv1.LabelServiceName]
		if owner == "" || (slice.AddressType != discoveryv1.AddressTypeIPv4 &&
			slice.AddressType != discoveryv1.AddressTypeIPv6) {
			continue // FQDN: names, not addresses
		}
		key := slice.Namespace + "/" + owner
		byService[key] = append(byService[key], slice)
	}

	out := []Service{}
	for _, svc := range services {
		if svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue // a DNS name, no addresses: nothing to carry
		}
		entry := Service{Namespace: svc.Namespace, Name: svc.Name, Ports: []Port{}}
		for _, sp := range svc.Spec.Ports {
			if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
				continue
			}
			port := Port{Name: sp.Name, Port: sp.Port,
				Endpoints: endpointsFor(sp.Name, byService[svc.Namespace+"/"+svc.Name], sidecarPods, refused)}
			entry.Ports = append(entry.Ports, port)
		}
		if len(entry.Ports) == 0 {
			continue
		}
		entry.ClusterIPs = clusterIPs(svc, refused)
		sort.Slice(entry.Ports, func(i, j int) bool { return entry.Ports[i].Port < entry.Ports[j].Port })
		out = append(out, entry)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
	return out, refused.sorted()
}

// clusterIPs keeps the API's order, the primary family's first (the one
// spec.clusterIP holds): a Service's ClusterIPs do not change while it
// lives, so the order keeps the file's bytes as steady as a sort would,
// and says which family the Service prefers.
func clusterIPs(svc *corev1.Service, refused refusals) []string {
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	out := []string{}
	for _, ip := range ips {
		addr, err := netip.ParseAddr(ip) // "None": headless
		if err != nil {
			continue
		}
		if why := refusal(addr); why != "" {
			refused.add("services", svc, addr, why)
			continue
		}
		// 10.96.0.1 and ::ffff:10.96.0.1 are one key in the table: once.
		if text := addr.Unmap().String(); !contains(out, text) {
			out = append(out, text)
		}
	}
	return out
}

// contains is slices.Contains, which this file's parameters named slices
// would hide.
func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// endpointsFor collects, over a Service's slices, the endpoints of the slice
// port named like the Service port (EndpointSlice ports carry the Service
// port's name and the resolved target port). An address listed twice (two
// slices during an update) keeps its best state.
func endpointsFor(portName string, slices []*discoveryv1.EndpointSlice, sidecarPods map[string]bool,
	refused refusals) []Endpoint {
	type key struct {
		address string
		port    int32
	}
	found := map[key]Endpoint{}
	for _, slice := range slices {
		target, ok := slicePort(slice, portName)
		if !ok {
			continue
		}
		for _, ep := range slice.Endpoints {
			state := endpointState(ep.Conditions)
			node, pod := "", ""
			if ep.NodeName != nil {
				node = *ep.NodeName
			}
			if ep.TargetRef != nil && ep.TargetRef.Kind == "Pod" {
				pod = ep.TargetRef.Name
			}
			for _, address := range ep.Addresses {
				addr, err := netip.ParseAddr(address)
				if err != nil {
					continue
				}
				if why := refusal(addr); why != "" {
					refused.add("endpointslices", slice, addr, why)
					continue
				}
				k := key{addr.Unmap().String(), target}
				if old, seen := found[k]; seen && stateRank(old.State) <= stateRank(state) {
					continue
				}
				found[k] = Endpoint{Address: k.address, Port: target, State: state, Node: node, Pod: pod,
					Rdmagw: pod != "" && sidecarPods[slice.Namespace+"/"+pod]}
			}
		}
	}
	out := make([]Endpoint, 0, len(found))
	for _, ep := range found {
		out = append(out, ep)
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := netip.ParseAddr(out[i].Address)
		b, _ := netip.ParseAddr(out[j].Address)
		if a != b {
			return a.Less(b)
		}
		return out[i].Port < out[j].Port
	})
	return out
}

func slicePort(slice *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range slice.Ports {
		pname := ""
		if p.Name != nil {
			pname = *p.Name
		}
		if pname != name || p.Port == nil {
			continue
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		return *p.Port, true
	}
	return 0, false
}

// endpointState follows the EndpointSlice API: a ready condition left unset
// means ready; terminating wins over both.
func endpointState(c discoveryv1.EndpointConditions) string {
	switch {
	case c.Terminating != nil && *c.Terminating:
		return StateTerminating
	case c.Ready == nil || *c.Ready:
		return StateReady
	default:
		return StateNotReady
	}
}

func stateRank(state string) int {
	switch state {
	case StateReady:
		return 0
	case StateTerminating:
		return 1
	default:
		return 2
	}
}

// BuildNodes turns the nodes that run a node-mode rdmagw into the file's
// nodes, sorted by name. A node's tunnel address is its TunnelAnnotation
// when it has one, else its first IPv4 InternalIP, else its first IPv6
// one. A node without a usable address is left out (its endpoints are then
// reached as those of a node without rdmagw) and listed in the second
// result, each once: so is one whose annotation is no IP address or one
// that refusal refuses, rather than falling back to the InternalIP, which
// the annotation says is not where its rdmagw listens.
func BuildNodes(nodes []*corev1.Node) ([]Node, []Refused) {
	refused := refusals{}
	out := []Node{}
	for _, n := range nodes {
		// The informer asks the API server for these nodes only; the
		// function does not rely on whoever calls it having asked.
		if _, has := n.Labels[NodeModeLabel]; !has || n.Name == "" {
			continue
		}
		if tunnel, ok := nodeTunnel(n, refused); ok {
			out = append(out, Node{Name: n.Name, Tunnel: tunnel})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, refused.sorted()
}

// maxRefusedText bounds the text of an annotation that is no address, as
// logged: annotations are any text, up to 256 KiB in all.
const maxRefusedText = 64

func nodeTunnel(n *corev1.Node, refused refusals) (string, bool) {
	if text, set := n.Annotations[TunnelAnnotation]; set {
		addr, err := netip.ParseAddr(text)
		switch {
		case err != nil:
			refused.addText("nodes", n, shorten(text, maxRefusedText), "not an IP address")
		case refusal(addr) != "":
			refused.add("nodes", n, addr, refusal(addr))
		default:
			return addr.Unmap().String(), true
		}
		return "", false
	}
	// IPv4 first, whichever family the node lists first (a dual-stack node
	// lists its IPv6 InternalIP first, or second): every node of a
	// dual-stack cluster reaches an IPv4 tunnel, while a client whose own
	// rdmagw is on IPv4 alone does not reach an IPv6 one; and the IPv4
	// address is the one a node's rdmagw usually binds (tunnel.address).
	// An IPv6-only node has only the other.
	var chosen netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		addr, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if addr.Unmap().Is4() {
			chosen = addr
			break
		}
		if !chosen.IsValid() {
			chosen = addr
		}
	}
	if !chosen.IsValid() {
		refused.addText("nodes", n, "", "no InternalIP and no "+TunnelAnnotation+" annotation")
		return "", false
	}
	// Refused like the annotation, not passed over for the next: the
	// reader refuses a table with such a tunnel whole, every sidecar of the
	// node with it, and a node whose first InternalIP is loopback is not
	// one to guess a tunnel for.
	if why := refusal(chosen); why != "" {
		refused.add("nodes", n, chosen, why)
		return "", false
	}
	return chosen.Unmap().String(), true
}
