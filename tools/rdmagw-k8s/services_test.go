// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"io"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

func ptr[T any](v T) *T { return &v }

func service(ns, name string, clusterIPs []string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIPs: clusterIPs, Ports: ports},
	}
}

func slice(ns, name, owner string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: owner}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       ports,
		Endpoints:   eps,
	}
}

func endpoint(address, pod string, ready, terminating *bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{address},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating},
		NodeName:   ptr("node-" + pod),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod},
	}
}

func TestNamedTargetPortsResolveThroughTheSlicesPortOfTheSameName(t *testing.T) {
	svc := service("default", "web", []string{"10.96.0.20"},
		corev1.ServicePort{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "admin", Port: 9000, Protocol: corev1.ProtocolTCP})
	s := slice("default", "web-abc", "web",
		[]discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080))}, {Name: ptr("admin"), Port: ptr(int32(9901))}},
		endpoint("10.0.1.5", "web-0", nil, nil))
	got, _ := BuildServices([]*corev1.Service{svc}, []*discoveryv1.EndpointSlice{s}, map[string]bool{"default/web-0": true})
	want := []Service{{Namespace: "default", Name: "web", ClusterIPs: []string{"10.96.0.20"}, Ports: []Port{
		{Name: "http", Port: 80, Endpoints: []Endpoint{{Address: "10.0.1.5", Port: 8080, State: StateReady,
			Node: "node-web-0", Pod: "web-0", Rdmagw: true}}},
		{Name: "admin", Port: 9000, Endpoints: []Endpoint{{Address: "10.0.1.5", Port: 9901, State: StateReady,
			Node: "node-web-0", Pod: "web-0", Rdmagw: true}}},
	}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestStatesFollowTheEndpointSliceConditions(t *testing.T) {
	svc := service("default", "redis", []string{"10.96.0.10"}, corev1.ServicePort{Port: 6379})
	s := slice("default", "redis-1", "redis", []discoveryv1.EndpointPort{{Port: ptr(int32(6379))}},
		endpoint("10.0.1.3", "r-unset", nil, nil),
		endpoint("10.0.1.1", "r-ready", ptr(true), ptr(false)),
		endpoint("10.0.1.2", "r-not-ready", ptr(false), nil),
		endpoint("10.0.1.4", "r-terminating", ptr(true), ptr(true)))
	got, _ := BuildServices([]*corev1.Service{svc}, []*discoveryv1.EndpointSlice{s}, nil)
	states := map[string]string{}
	order := []string{}
	for _, ep := range got[0].Ports[0].Endpoints {
		states[ep.Pod] = ep.State
		order = append(order, ep.Address)
	}
	want := map[string]string{"r-unset": StateReady, "r-ready": StateReady, "r-not-ready": StateNotReady,
		"r-terminating": StateTerminating}
	if !reflect.DeepEqual(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	if !reflect.DeepEqual(order, []string{"10.0.1.1", "10.0.1.2", "10.0.1.3", "10.0.1.4"}) {
		t.Fatalf("endpoints not sorted by address: %v", order)
	}
	if got[0].Ports[0].Endpoints[0].Rdmagw {
		t.Fatal("a pod without the sidecar label is marked as having rdmagw")
	}
}

func TestAnAddressInTwoSlicesKeepsItsBestState(t *testing.T) {
	svc := service("default", "db", []string{"10.96.0.30"}, corev1.ServicePort{Port: 5432})
	port := []discoveryv1.EndpointPort{{Port: ptr(int32(5432))}}
	old := slice("default", "db-old", "db", port, endpoint("10.0.2.1", "db-0", ptr(false), nil))
	fresh := slice("default", "db-new", "db", port, endpoint("10.0.2.1", "db-0", ptr(true), nil))
	for _, order := range [][]*discoveryv1.EndpointSlice{{old, fresh}, {fresh, old}} {
		got, _ := BuildServices([]*corev1.Service{svc}, order, nil)
		eps := got[0].Ports[0].Endpoints
		if len(eps) != 1 || eps[0].State != StateReady {
			t.Fatalf("slices %s, %s: %+v", order[0].Name, order[1].Name, eps)
		}
	}
}

func TestWhatASidecarCannotCarryIsLeftOut(t *testing.T) {
	external := service("default", "ext", nil, corev1.ServicePort{Port: 443})
	external.Spec.Type = corev1.ServiceTypeExternalName
	udpOnly := service("default", "dns", []string{"10.96.0.53"}, corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP})
	mixed := service("default", "mixed", []string{"10.96.0.40"},
		corev1.ServicePort{Name: "tcp", Port: 7000, Protocol: corev1.ProtocolTCP},
		corev1.ServicePort{Name: "udp", Port: 7000, Protocol: corev1.ProtocolUDP})
	headless := service("default", "hl", []string{"None"}, corev1.ServicePort{Port: 6379})
	fqdn := slice("default", "mixed-fqdn", "mixed", []discoveryv1.EndpointPort{{Name: ptr("tcp"), Port: ptr(int32(7000))}},
		endpoint("db.example.com", "m-0", nil, nil))
	fqdn.AddressType = discoveryv1.AddressTypeFQDN
	hl := slice("default", "hl-1", "hl", []discoveryv1.EndpointPort{{Port: ptr(int32(6379))}},
		endpoint("10.0.3.1", "hl-0", nil, nil))
	hl6 := slice("default", "hl-2", "hl", []discoveryv1.EndpointPort{{Port: ptr(int32(6379))}},
		endpoint("fd00:10::3", "hl-0", nil, nil))
	hl6.AddressType = discoveryv1.AddressTypeIPv6
	got, _ := BuildServices([]*corev1.Service{external, udpOnly, mixed, headless},
		[]*discoveryv1.EndpointSlice{fqdn, hl, hl6}, nil)
	if len(got) != 2 || got[0].Name != "hl" || got[1].Name != "mixed" {
		t.Fatalf("want hl and mixed only: %+v", got)
	}
	if len(got[0].ClusterIPs) != 0 || len(got[0].Ports[0].Endpoints) != 2 {
		t.Fatalf("headless: no ClusterIP, its endpoints of both families listed: %+v", got[0])
	}
	if !reflect.DeepEqual(got[1].ClusterIPs, []string{"10.96.0.40"}) || len(got[1].Ports) != 1 ||
		len(got[1].Ports[0].Endpoints) != 0 {
		t.Fatalf("mixed: TCP only, no FQDN endpoint: %+v", got[1])
	}
}

func TestADualStackServiceCarriesBothFamilies(t *testing.T) {
	// IPv6 first: the Service's primary family, and the file keeps it first.
	svc := service("default", "kv", []string{"fd00:96::a", "10.96.0.40"},
		corev1.ServicePort{Name: "tcp", Port: 7000, Protocol: corev1.ProtocolTCP})
	port := []discoveryv1.EndpointPort{{Name: ptr("tcp"), Port: ptr(int32(7001))}}
	v4 := slice("default", "kv-v4", "kv", port, endpoint("10.0.4.1", "kv-0", nil, nil),
		endpoint("10.0.4.2", "kv-1", ptr(false), nil))
	// Text as the API server would not write it: canonical in the file,
	// and a v4-mapped address as the IPv4 one, found twice and kept once
	// (the IPv4 slice says not-ready, this one ready: the best state).
	v6 := slice("default", "kv-v6", "kv", port, endpoint("FD00:10:0:0::1", "kv-0", nil, nil),
		endpoint("fd00:10::2", "kv-1", ptr(false), nil), endpoint("::ffff:10.0.4.2", "kv-1", ptr(true), nil))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	for _, order := range [][]*discoveryv1.EndpointSlice{{v4, v6}, {v6, v4}} {
		got, refused := BuildServices([]*corev1.Service{svc}, order, map[string]bool{"default/kv-0": true})
		ep := func(address, pod, state string) Endpoint {
			return Endpoint{Address: address, Port: 7001, State: state, Node: "node-" + pod, Pod: pod, Rdmagw: pod == "kv-0"}
		}
		want := []Service{{Namespace: "default", Name: "kv", ClusterIPs: []string{"fd00:96::a", "10.96.0.40"},
			Ports: []Port{{Name: "tcp", Port: 7000, Endpoints: []Endpoint{
				ep("10.0.4.1", "kv-0", StateReady), ep("10.0.4.2", "kv-1", StateReady),
				ep("fd00:10::1", "kv-0", StateReady), ep("fd00:10::2", "kv-1", StateNotReady)}}}}}
		if !reflect.DeepEqual(got, want) || len(refused) != 0 {
			t.Fatalf("slices %s, %s: got  %+v (refused %+v)\nwant %+v", order[0].Name, order[1].Name, got, refused, want)
		}
		data, _ := json.Marshal(got)
		if !strings.Contains(string(data), `"cluster_ips":["fd00:96::a","10.96.0.40"]`) {
			t.Fatalf("ClusterIPs as JSON: %s", data)
		}
	}

	// spec.clusterIP alone (an object written before spec.clusterIPs), of
	// either family; and the two texts of one address, once.
	old := service("default", "old", nil, corev1.ServicePort{Port: 80})
	old.Spec.ClusterIP = "fd00:96::b"
	mapped := service("default", "mapped", []string{"10.96.0.41", "::ffff:10.96.0.41"}, corev1.ServicePort{Port: 80})
	got, _ := BuildServices([]*corev1.Service{old, mapped}, nil, nil)
	if !reflect.DeepEqual(got[0].ClusterIPs, []string{"10.96.0.41"}) ||
		!reflect.DeepEqual(got[1].ClusterIPs, []string{"fd00:96::b"}) {
		t.Fatalf("mapped %+v, old %+v", got[0].ClusterIPs, got[1].ClusterIPs)
	}
}

func TestTheSameObjectsGiveTheSameBytes(t *testing.T) {
	a := service("b", "x", []string{"10.96.0.2"}, corev1.ServicePort{Port: 1})
	b := service("a", "y", []string{"10.96.0.1"}, corev1.ServicePort{Port: 2})
	s1 := slice("a", "y-1", "y", []discoveryv1.EndpointPort{{Port: ptr(int32(2))}},
		endpoint("10.0.0.9", "y-0", nil, nil), endpoint("10.0.0.10", "y-1", nil, nil))
	built, _ := BuildServices([]*corev1.Service{a, b}, []*discoveryv1.EndpointSlice{s1}, nil)
	first, _ := json.Marshal(built)
	built, _ = BuildServices([]*corev1.Service{b, a}, []*discoveryv1.EndpointSlice{s1}, nil)
	second, _ := json.Marshal(built)
	if string(first) != string(second) {
		t.Fatalf("order of the informers' lists changed the file:\n%s\n%s", first, second)
	}
	got, _ := BuildServices([]*corev1.Service{a, b}, []*discoveryv1.EndpointSlice{s1}, nil)
	if got[0].Namespace != "a" || got[0].Ports[0].Endpoints[0].Address != "10.0.0.9" {
		t.Fatalf("not sorted by namespace, then by address as numbers: %+v", got)
	}
}

func TestAddressesThatAreNoEndpointsAreRefused(t *testing.T) {
	cases := map[string]string{
		"127.0.0.1":         "loopback",
		"127.1.2.3":         "loopback",
		"::1":               "loopback",
		"::ffff:127.0.0.1":  "loopback",
		"0.0.0.0":           "unspecified",
		"0.1.2.3":           "unspecified",
		"255.255.255.255":   "broadcast",
		"::":                "unspecified",
		"::ffff:0.0.0.0":    "unspecified",
		"169.254.169.254":   "link-local",
		"fe80::1":           "link-local",
		"febf::1":           "link-local",
		"224.0.0.1":         "link-local-multicast",
		"ff02::1":           "link-local-multicast",
		"ff01::1":           "interface-local-multicast",
		"224.0.1.1":         "multicast",
		"239.255.255.250":   "multicast",
		"ff05::2":           "multicast",
		"10.0.1.5":          "",
		"100.64.0.1":        "",
		"169.253.255.255":   "",
		"169.255.0.1":       "",
		"223.255.255.255":   "",
		"128.0.0.1":         "",
		"fd00::1":           "",
		"fec0::1":           "",
		"fd00::1%eth0":      "zone",
		"fe80::1%eth0":      "zone",
		"::ffff:10.0.0.1%0": "zone",
	}
	for text, want := range cases {
		if got := refusal(netip.MustParseAddr(text)); got != want {
			t.Errorf("refusal(%s) = %q, want %q", text, got, want)
		}
	}
}

func TestRefusedEndpointsAndClusterIPsAreLeftOutAndListed(t *testing.T) {
	bad := []string{"127.0.0.1", "0.0.0.0", "169.254.169.254", "224.0.0.251", "239.1.2.3", "::1", "fe80::1",
		"ff02::1", "::ffff:127.0.0.1"}
	ports := []discoveryv1.EndpointPort{{Name: ptr("a"), Port: ptr(int32(6379))}, {Name: ptr("b"), Port: ptr(int32(9901))}}
	hostile := slice("default", "redis-x", "redis", ports,
		discoveryv1.Endpoint{Addresses: append([]string{"10.0.1.5"}, bad...), NodeName: ptr("n1")},
		endpoint("10.0.1.6", "redis-1", nil, nil))
	hostile.ResourceVersion = "41"
	svc := service("default", "redis", []string{"10.96.0.10"},
		corev1.ServicePort{Name: "a", Port: 6379}, corev1.ServicePort{Name: "b", Port: 9901})
	loopbackIP := service("default", "lo", []string{"127.0.0.1"}, corev1.ServicePort{Port: 80})
	loopbackIP.ResourceVersion = "7"
	dual := service("default", "dual", []string{"::1", "10.96.0.40"}, corev1.ServicePort{Port: 81})
	dual.ResourceVersion = "8"
	oneIP := service("default", "old", nil, corev1.ServicePort{Port: 82})
	oneIP.Spec.ClusterIP = "169.254.0.1"
	oneIP.ResourceVersion = "9"
	v6IPs := service("default", "v6", []string{"fe80::1", "ff02::1"}, corev1.ServicePort{Port: 83})
	v6IPs.ResourceVersion = "10"
	loSlice := slice("default", "lo-1", "lo", []discoveryv1.EndpointPort{{Port: ptr(int32(8080))}},
		endpoint("10.0.2.1", "lo-0", nil, nil))
	hostile6 := slice("default", "redis-y", "redis", ports,
		discoveryv1.Endpoint{Addresses: []string{"fd00:10::5", "::1", "fe80::1", "ff02::1", "::", "fd00:10::6%eth0"}})
	hostile6.AddressType = discoveryv1.AddressTypeIPv6
	hostile6.ResourceVersion = "42"

	got, refused := BuildServices([]*corev1.Service{svc, loopbackIP, dual, oneIP, v6IPs},
		[]*discoveryv1.EndpointSlice{hostile, loSlice, hostile6}, nil)
	if len(got) != 5 {
		t.Fatalf("want dual, lo, old, redis and v6: %+v", got)
	}
	byName := map[string]Service{}
	for _, s := range got {
		byName[s.Name] = s
	}
	// A Service whose every ClusterIP is refused is written with none, and
	// keeps its endpoints; the others keep the ClusterIPs that may stay.
	if ips := byName["lo"].ClusterIPs; ips == nil || len(ips) != 0 {
		t.Fatalf("lo: want an empty cluster_ips, got %#v", ips)
	}
	if eps := byName["lo"].Ports[0].Endpoints; len(eps) != 1 || eps[0].Address != "10.0.2.1" {
		t.Fatalf("lo: its endpoint went too: %+v", eps)
	}
	if !reflect.DeepEqual(byName["dual"].ClusterIPs, []string{"10.96.0.40"}) {
		t.Fatalf("dual: %+v", byName["dual"].ClusterIPs)
	}
	if len(byName["old"].ClusterIPs) != 0 || len(byName["v6"].ClusterIPs) != 0 {
		t.Fatalf("old (spec.clusterIP only): %+v, v6: %+v", byName["old"].ClusterIPs, byName["v6"].ClusterIPs)
	}
	for _, port := range byName["redis"].Ports {
		var addresses []string
		for _, ep := range port.Endpoints {
			addresses = append(addresses, ep.Address)
		}
		if !reflect.DeepEqual(addresses, []string{"10.0.1.5", "10.0.1.6", "fd00:10::5"}) {
			t.Fatalf("redis port %d: endpoints %v, want 10.0.1.5, 10.0.1.6 and fd00:10::5 only", port.Port, addresses)
		}
	}
	data, _ := json.Marshal(got)
	for _, b := range []string{"127.0.0.1", "0.0.0.0", "169.254.", "224.", "239.", "::1", "fe80", "ff02", "::ffff",
		`"::"`, "%", "fd00:10::6"} {
		if strings.Contains(string(data), b) {
			t.Fatalf("%s in the file:\n%s", b, data)
		}
	}
	if !strings.Contains(string(data), `"name":"lo","cluster_ips":[]`) {
		t.Fatalf("lo is not written with an empty cluster_ips:\n%s", data)
	}

	// Each refused address once, though two Service ports read the slice.
	want := []Refused{
		{"endpointslices", "default", "redis-x", "41", "0.0.0.0", "unspecified"},
		{"endpointslices", "default", "redis-x", "41", "127.0.0.1", "loopback"},
		{"endpointslices", "default", "redis-x", "41", "169.254.169.254", "link-local"},
		{"endpointslices", "default", "redis-x", "41", "224.0.0.251", "link-local-multicast"},
		{"endpointslices", "default", "redis-x", "41", "239.1.2.3", "multicast"},
		{"endpointslices", "default", "redis-x", "41", "::1", "loopback"},
		{"endpointslices", "default", "redis-x", "41", "::ffff:127.0.0.1", "loopback"},
		{"endpointslices", "default", "redis-x", "41", "fe80::1", "link-local"},
		{"endpointslices", "default", "redis-x", "41", "ff02::1", "link-local-multicast"},
		{"endpointslices", "default", "redis-y", "42", "::", "unspecified"},
		{"endpointslices", "default", "redis-y", "42", "::1", "loopback"},
		{"endpointslices", "default", "redis-y", "42", "fd00:10::6%eth0", "zone"},
		{"endpointslices", "default", "redis-y", "42", "fe80::1", "link-local"},
		{"endpointslices", "default", "redis-y", "42", "ff02::1", "link-local-multicast"},
		{"services", "default", "dual", "8", "::1", "loopback"},
		{"services", "default", "lo", "7", "127.0.0.1", "loopback"},
		{"services", "default", "old", "9", "169.254.0.1", "link-local"},
		{"services", "default", "v6", "10", "fe80::1", "link-local"},
		{"services", "default", "v6", "10", "ff02::1", "link-local-multicast"},
	}
	if !reflect.DeepEqual(refused, want) {
		t.Fatalf("refused:\n%+v\nwant\n%+v", refused, want)
	}

	// Nothing refused in a Service that is not written (UDP only).
	udp := service("default", "dns", []string{"127.0.0.53"}, corev1.ServicePort{Port: 53, Protocol: corev1.ProtocolUDP})
	if _, refused := BuildServices([]*corev1.Service{udp}, nil, nil); len(refused) != 0 {
		t.Fatalf("refusals for a Service left out anyway: %+v", refused)
	}
}

func TestARefusalIsLoggedOncePerObjectVersion(t *testing.T) {
	var lines []Refused
	log := refusalLog{write: func(r Refused) { lines = append(lines, r) }}
	svc := service("default", "lo", []string{"127.0.0.1"}, corev1.ServicePort{Port: 80})
	svc.ResourceVersion = "1"
	other := service("default", "web", []string{"10.96.0.20"}, corev1.ServicePort{Port: 80})
	build := func(services ...*corev1.Service) {
		_, refused := BuildServices(services, nil, nil)
		log.report(refused)
	}
	build(svc, other)
	build(svc, other) // a change elsewhere: the file is built again
	other.ResourceVersion = "5"
	build(svc, other)
	if len(lines) != 1 || lines[0].Name != "lo" || lines[0].Address != "127.0.0.1" || lines[0].Reason != "loopback" {
		t.Fatalf("want one line for lo, got %+v", lines)
	}
	svc.ResourceVersion = "2" // a new version that still lists it: logged again
	build(svc, other)
	build(svc, other)
	if len(lines) != 2 || lines[1].ResourceVersion != "2" {
		t.Fatalf("want a second line for version 2, got %+v", lines)
	}
	build(other) // deleted, then created again
	build(svc, other)
	if len(lines) != 3 {
		t.Fatalf("want a third line after the Service came back, got %+v", lines)
	}
}

func TestTheRefusalLineIsInRdmagwsLogFormat(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	var log refusalLog
	log.report([]Refused{{"endpointslices", "default", "redis-x", "41", "127.0.0.1", "loopback"}})
	os.Stderr = stderr
	w.Close()
	out, _ := io.ReadAll(r)
	line := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z warn event=address_refused ` +
		`resource=endpointslices namespace=default name=redis-x resource_version=41 address=127.0.0.1 reason=loopback\n$`)
	if !line.Match(out) {
		t.Fatalf("log line %q", out)
	}
}

func TestLogValuesReadBackAsOneToken(t *testing.T) {
	cases := map[string]string{
		"plain":       "plain",
		"":            `""`,
		"two words":   `"two words"`,
		"a\"b":        `"a\"b"`,
		"line\nbreak": `"line\nbreak"`,
		"k=v":         `"k=v"`,
		"\xff":        `"\xff"`,
		"back\\slash": `"back\\slash"`,
		"ünï":         `"ünï"`,
	}
	for in, want := range cases {
		if got := quoteValue(in); got != want {
			t.Errorf("quoteValue(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestShortenCutsAtACharacterBoundary(t *testing.T) {
	if got := shorten("short", 10); got != "short" {
		t.Fatalf("shorten kept nothing intact: %q", got)
	}
	if got := shorten("abcdefgh", 4); got != "abcd..." {
		t.Fatalf("shorten(abcdefgh, 4) = %q", got)
	}
	// "é" is two bytes: a cut inside it moves before it.
	if got := shorten("aaaé", 4); got != "aaa..." {
		t.Fatalf("shorten(aaaé, 4) = %q", got)
	}
}

// node is a Node as the informer holds it; tunnel "" for none.
func node(name, resourceVersion string, nodeMode bool, tunnel string, addresses ...corev1.NodeAddress) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: resourceVersion}}
	if nodeMode {
		n.Labels = map[string]string{NodeModeLabel: ""}
	}
	if tunnel != "" {
		n.Annotations = map[string]string{TunnelAnnotation: tunnel}
	}
	n.Status.Addresses = addresses
	return n
}

func internal(address string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: address}
}

func TestNodeModeNodesGetTheirAnnotationElseTheirFirstInternalIPIPv4First(t *testing.T) {
	nodes := []*corev1.Node{
		node("c-annotated", "3", true, "192.168.7.3", internal("10.0.0.3")),
		node("a-dual-stack", "1", true, "",
			corev1.NodeAddress{Type: corev1.NodeHostName, Address: "a"},
			corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.1"},
			internal("fd00::1"), internal("10.0.0.1"), internal("10.0.0.99")),
		node("b-no-label", "2", false, "192.168.7.2", internal("10.0.0.2")),
		node("d-mapped", "4", true, "::ffff:192.168.7.4"),
	}
	got, refused := BuildNodes(nodes)
	want := []Node{{Name: "a-dual-stack", Tunnel: "10.0.0.1"}, {Name: "c-annotated", Tunnel: "192.168.7.3"},
		{Name: "d-mapped", Tunnel: "192.168.7.4"}}
	if !reflect.DeepEqual(got, want) || len(refused) != 0 {
		t.Fatalf("got %+v (refused %+v)\nwant %+v", got, refused, want)
	}

	// IPv6: annotated (an IPv6 annotation wins over an IPv4 InternalIP, as
	// any annotation does), the only family, or the second of one family.
	v6 := []*corev1.Node{
		node("e-v6-annotation", "5", true, "FD00:0::5", internal("10.0.0.5")),
		node("f-v6-only", "6", true, "", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "2001:db8::6"},
			internal("fd00::6"), internal("fd00::66")),
		node("g-v4-second", "7", true, "", internal("fd00::7"), internal("not an address"), internal("10.0.0.7")),
		node("h-v6-mapped", "8", true, "", internal("fd00::8"), internal("::ffff:10.0.0.8")),
	}
	got6, refused6 := BuildNodes(v6)
	want6 := []Node{{Name: "e-v6-annotation", Tunnel: "fd00::5"}, {Name: "f-v6-only", Tunnel: "fd00::6"},
		{Name: "g-v4-second", Tunnel: "10.0.0.7"}, {Name: "h-v6-mapped", Tunnel: "10.0.0.8"}}
	if !reflect.DeepEqual(got6, want6) || len(refused6) != 0 {
		t.Fatalf("got %+v (refused %+v)\nwant %+v", got6, refused6, want6)
	}

	// The informers' order is no order: the same nodes, the same bytes.
	reversed := []*corev1.Node{nodes[3], nodes[2], nodes[1], nodes[0]}
	first, _ := json.Marshal(got)
	again, _ := BuildNodes(reversed)
	second, _ := json.Marshal(again)
	if string(first) != string(second) {
		t.Fatalf("order of the informer's list changed the file:\n%s\n%s", first, second)
	}
	if string(first) != `[{"name":"a-dual-stack","tunnel":"10.0.0.1"},{"name":"c-annotated","tunnel":"192.168.7.3"},`+
		`{"name":"d-mapped","tunnel":"192.168.7.4"}]` {
		t.Fatalf("nodes as JSON: %s", first)
	}
	none, _ := BuildNodes(nil)
	data, _ := json.Marshal(File{Nodes: none})
	if !strings.Contains(string(data), `"api":{"reachable":false,"since":""},"nodes":[],"services"`) {
		t.Fatalf("no node is not an empty list between api and services: %s", data)
	}
}

func TestNodesWithoutAUsableTunnelAddressAreLeftOutAndListed(t *testing.T) {
	nodes := []*corev1.Node{
		node("loopback", "1", true, "127.0.0.1", internal("10.0.0.1")),
		node("garbage", "2", true, "node-2.example:7480", internal("10.0.0.2")),
		node("v6-link-local", "3", true, "fe80::3", internal("10.0.0.3")),
		node("v6-zone", "4", true, "fd00::4%eth0", internal("10.0.0.4")),
		node("link-local", "5", true, "", internal("169.254.0.5"), internal("10.0.0.5")),
		node("no-addresses", "6", true, "", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.6"}),
		node("long", "7", true, strings.Repeat("x", 1000)),
		node("ok", "8", true, "", internal("10.0.0.8")),
		node("v6-loopback", "9", true, "", internal("::1"), internal("fd00::9")),
		// The IPv4 InternalIP is the one chosen, and refused: not passed
		// over for the IPv6 one.
		node("v4-refused", "10", true, "", internal("fd00::10"), internal("127.0.0.10")),
		node("v6-multicast", "11", true, "ff02::1"),
	}
	got, refused := BuildNodes(nodes)
	if !reflect.DeepEqual(got, []Node{{Name: "ok", Tunnel: "10.0.0.8"}}) {
		t.Fatalf("want ok only: %+v", got)
	}
	none := "no InternalIP and no rdmagw.io/tunnel-address annotation"
	want := []Refused{
		{"nodes", "", "garbage", "2", "node-2.example:7480", "not an IP address"},
		{"nodes", "", "link-local", "5", "169.254.0.5", "link-local"},
		{"nodes", "", "long", "7", strings.Repeat("x", maxRefusedText) + "...", "not an IP address"},
		{"nodes", "", "loopback", "1", "127.0.0.1", "loopback"},
		{"nodes", "", "no-addresses", "6", "", none},
		{"nodes", "", "v4-refused", "10", "127.0.0.10", "loopback"},
		{"nodes", "", "v6-link-local", "3", "fe80::3", "link-local"},
		{"nodes", "", "v6-loopback", "9", "::1", "loopback"},
		{"nodes", "", "v6-multicast", "11", "ff02::1", "link-local-multicast"},
		{"nodes", "", "v6-zone", "4", "fd00::4%eth0", "zone"},
	}
	if !reflect.DeepEqual(refused, want) {
		t.Fatalf("refused:\n%+v\nwant\n%+v", refused, want)
	}
}

func TestANodeIsSlimmedToWhatBuildNodesReads(t *testing.T) {
	n := node("n1", "9", true, "192.168.0.1", internal("10.0.0.1"))
	n.Labels["kubernetes.io/hostname"] = "n1"
	n.Annotations["node.alpha.kubernetes.io/ttl"] = "0"
	n.UID = "u"
	n.Status.Images = []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	slimmed, err := slimNode(n)
	if err != nil {
		t.Fatal(err)
	}
	want := node("n1", "9", true, "192.168.0.1", internal("10.0.0.1"))
	if !reflect.DeepEqual(slimmed, want) {
		t.Fatalf("slimmed %+v\nwant    %+v", slimmed, want)
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "n1", Obj: n}
	if kept, _ := slimNode(tombstone); !reflect.DeepEqual(kept, tombstone) {
		t.Fatalf("a tombstone changed: %+v", kept)
	}
}

// What --once prints: Build over the informers' caches, the nodes with the rest.
func TestBuildWritesTheNodesOfTheCache(t *testing.T) {
	informer := func(example runtime.Object) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(&cache.ListWatch{}, example, 0, cache.Indexers{})
	}
	var lines []Refused
	f := &Feed{services: informer(&corev1.Service{}), slices: informer(&discoveryv1.EndpointSlice{}),
		pods: informer(&metav1.PartialObjectMetadata{}), nodes: informer(&corev1.Node{}),
		refused: refusalLog{write: func(r Refused) { lines = append(lines, r) }}}
	data, _ := json.MarshalIndent(f.Build(), "", " ")
	if !strings.Contains(string(data), "\"nodes\": [],\n") {
		t.Fatalf("no node: %s", data)
	}
	for _, obj := range []any{node("n2", "1", true, "192.168.0.2"), node("n1", "1", true, "", internal("10.0.0.1")),
		node("n3", "1", true, "127.0.0.1"),
		service("default", "web", []string{"10.96.0.20"}, corev1.ServicePort{Port: 80}),
		slice("default", "web-1", "web", []discoveryv1.EndpointPort{{Port: ptr(int32(8080))}},
			endpoint("10.0.1.5", "web-0", nil, nil))} {
		var store cache.Store
		switch obj.(type) {
		case *corev1.Node:
			store = f.nodes.GetStore()
		case *corev1.Service:
			store = f.services.GetStore()
		default:
			store = f.slices.GetStore()
		}
		if err := store.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	file := f.Build()
	if !reflect.DeepEqual(file.Nodes, []Node{{Name: "n1", Tunnel: "10.0.0.1"}, {Name: "n2", Tunnel: "192.168.0.2"}}) {
		t.Fatalf("nodes %+v", file.Nodes)
	}
	if len(file.Services) != 1 || file.Services[0].Ports[0].Endpoints[0].Node != "node-web-0" {
		t.Fatalf("services %+v", file.Services)
	}
	if len(lines) != 1 || lines[0].Resource != "nodes" || lines[0].Name != "n3" {
		t.Fatalf("refusals logged: %+v", lines)
	}
	if _, err := EncodeTable(file); err != nil {
		t.Fatalf("the file as a table: %v", err)
	}
}
