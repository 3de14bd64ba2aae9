// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleFile's nodes: n1 named by endpoints only, n2 by an endpoint and
// with a node-mode rdmagw, n3 with one and no endpoint; and an endpoint
// that names no node (10.0.2.2).
func sampleFile() File {
	ep := Endpoint{Address: "10.0.1.1", Port: 6380, State: StateReady, Node: "n1", Pod: "redis-0", Rdmagw: true}
	return File{Format: FileFormat, API: APIStatus{Reachable: false, Since: "2026-11-29T10:00:00Z", Error: "x\x1b[2J"},
		Nodes: []Node{{Name: "n2", Tunnel: "192.168.0.2"}, {Name: "n3", Tunnel: "192.168.0.3"}},
		Services: []Service{
			{Namespace: "default", Name: "redis", ClusterIPs: []string{"10.96.0.10"}, Ports: []Port{{Name: "redis", Port: 6379,
				Endpoints: []Endpoint{ep, {Address: "10.0.1.2", Port: 6380, State: StateNotReady, Node: "n1", Pod: "redis-1"}}}}},
			{Namespace: "db", Name: "pg", Ports: []Port{{Port: 5432, Endpoints: []Endpoint{{Address: "10.0.2.1", Port: 5432,
				State: StateTerminating, Node: "n2"}, {Address: "10.0.2.2", Port: 5432, State: StateReady}}}}},
		}}
}

type section struct{ offset, count uint32 }

// tableNode is a NodeRecord as read back.
type tableNode struct {
	name          string
	tunnel        [16]byte
	flags, unused uint32
}

func tableNodes(t *testing.T, table []byte) []tableNode {
	le := binary.LittleEndian
	s := sections(t, table)
	var out []tableNode
	for i := uint32(0); i < s[8].count; i++ {
		rec := table[s[8].offset+i*nodeRecordBytes:]
		n := tableNode{name: tableString(t, table, rec[0:]), flags: le.Uint32(rec[24:]), unused: le.Uint32(rec[28:])}
		copy(n.tunnel[:], rec[8:24])
		out = append(out, n)
	}
	return out
}

// tableString reads the StringRef at ref.
func tableString(t *testing.T, table []byte, ref []byte) string {
	le := binary.LittleEndian
	strs := sections(t, table)[0]
	offset, length := le.Uint32(ref), le.Uint32(ref[4:])
	if offset+length > strs.count {
		t.Fatalf("a string at %d, %d bytes, outside the %d bytes of strings", offset, length, strs.count)
	}
	return string(table[strs.offset+offset : strs.offset+offset+length])
}

// endpointRecord is the nth EndpointRecord's bytes.
func endpointRecord(t *testing.T, table []byte, n uint32) []byte {
	s := sections(t, table)[4]
	if n >= s.count {
		t.Fatalf("endpoint %d of %d", n, s.count)
	}
	return table[s.offset+n*endpointBytes : s.offset+(n+1)*endpointBytes]
}

// tableAddress is an AddressRecord's 16 bytes as an address: IPv4 for
// ::ffff:a.b.c.d, as the reader takes it.
func tableAddress(record []byte) netip.Addr {
	return netip.AddrFrom16([16]byte(record[:16])).Unmap()
}

// tableService, tablePort and tableEndpoint are the records as read back:
// each Service with its ClusterIPs and ports, each port with its
// endpoints, through the records' ranges.
type tableService struct {
	namespace, name string
	clusterIPs      []netip.Addr
	ports           []tablePort
}

type tablePort struct {
	name      string
	port      uint16
	endpoints []tableEndpoint
	ready     []uint32
}

type tableEndpoint struct {
	address   netip.Addr
	port      uint16
	state     uint8
	flags     uint8
	portIndex uint32
	pod       string
	node      uint32
}

func tableServices(t *testing.T, table []byte) []tableService {
	le := binary.LittleEndian
	s := sections(t, table)
	within := func(section, first, count uint32) {
		if first+count < first || first+count > s[section].count {
			t.Fatalf("records [%d, %d) of section %d, which has %d", first, first+count, section, s[section].count)
		}
	}
	var out []tableService
	for i := uint32(0); i < s[1].count; i++ {
		rec := table[s[1].offset+i*serviceRecordBytes:]
		svc := tableService{namespace: tableString(t, table, rec[0:]), name: tableString(t, table, rec[8:])}
		firstIP, ips, firstPort, ports := le.Uint32(rec[16:]), le.Uint32(rec[20:]), le.Uint32(rec[24:]), le.Uint32(rec[28:])
		within(2, firstIP, ips)
		for j := firstIP; j < firstIP+ips; j++ {
			svc.clusterIPs = append(svc.clusterIPs, tableAddress(table[s[2].offset+j*addressBytes:]))
		}
		within(3, firstPort, ports)
		for j := firstPort; j < firstPort+ports; j++ {
			prec := table[s[3].offset+j*portRecordBytes:]
			if service := le.Uint32(prec[0:]); service != i {
				t.Fatalf("port %d names Service %d, listed by %d", j, service, i)
			}
			p := tablePort{name: tableString(t, table, prec[4:]), port: le.Uint16(prec[12:])}
			firstEp, eps, firstReady, ready := le.Uint32(prec[16:]), le.Uint32(prec[20:]), le.Uint32(prec[24:]),
				le.Uint32(prec[28:])
			for k := firstEp; k < firstEp+eps; k++ {
				erec := endpointRecord(t, table, k)
				p.endpoints = append(p.endpoints, tableEndpoint{address: tableAddress(erec), port: le.Uint16(erec[16:]),
					state: erec[18], flags: erec[19], portIndex: le.Uint32(erec[20:]),
					pod: tableString(t, table, erec[24:]), node: le.Uint32(erec[32:])})
			}
			within(5, firstReady, ready)
			for k := firstReady; k < firstReady+ready; k++ {
				p.ready = append(p.ready, le.Uint32(table[s[5].offset+k*4:]))
			}
			svc.ports = append(svc.ports, p)
		}
		out = append(out, svc)
	}
	return out
}

// lookup searches the index of section (6: ClusterIPs, 7: endpoints) for
// address:port as a reader does, and returns the slot's value.
func lookup(t *testing.T, table []byte, section int, address netip.Addr, port uint16) (uint32, bool) {
	le := binary.LittleEndian
	s := sections(t, table)[section]
	n := uint64(s.count)
	if n == 0 {
		return 0, false
	}
	index := table[s.offset : s.offset+s.count*slotBytes]
	k := indexKey{address.As16(), port}
	for i, probes := slotHash(k)&(n-1), uint64(0); probes < n; i, probes = (i+1)&(n-1), probes+1 {
		slot := index[i*slotBytes:]
		if le.Uint16(slot[18:]) == 0 {
			break
		}
		if [16]byte(slot[:16]) == k.addr && le.Uint16(slot[16:]) == k.port {
			return le.Uint32(slot[20:]), true
		}
	}
	return 0, false
}

func sections(t *testing.T, table []byte) []section {
	le := binary.LittleEndian
	var out []section
	for i := 0; i < tableSections; i++ {
		out = append(out, section{le.Uint32(table[48+8*i:]), le.Uint32(table[52+8*i:])})
	}
	return out
}

func TestATableHasItsHeaderChecksumAndSectionsInsideIt(t *testing.T) {
	table, err := EncodeTable(sampleFile())
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	if string(table[:8]) != "RDMGWSVC" || le.Uint32(table[8:]) != tableVersion {
		t.Fatalf("header %q version %d", table[:8], le.Uint32(table[8:]))
	}
	if le.Uint64(table[16:]) != uint64(len(table)) || len(table)%8 != 0 {
		t.Fatalf("length %d, header says %d", len(table), le.Uint64(table[16:]))
	}
	if sum := crc32.Checksum(table[checksummedFrom:], castagnoli); sum != le.Uint32(table[12:]) {
		t.Fatalf("checksum %x, header says %x", sum, le.Uint32(table[12:]))
	}
	if tableHeaderBytes != 48+8*tableSections {
		t.Fatalf("a header of %d bytes does not end with %d sections", tableHeaderBytes, tableSections)
	}
	sizes := []int{1, serviceRecordBytes, addressBytes, portRecordBytes, endpointBytes, 4, slotBytes, slotBytes,
		nodeRecordBytes}
	counts := []uint32{0, 2, 1, 2, 4, 2, 2, 8, 3} // indexes: a power of two above 5/4 of the keys
	for i, s := range sections(t, table) {
		if s.offset%8 != 0 || int(s.offset)+int(s.count)*sizes[i] > len(table) {
			t.Errorf("section %d at %d, %d records: not inside %d bytes at a multiple of 8", i, s.offset, s.count, len(table))
		}
		if i > 0 && s.count != counts[i] {
			t.Errorf("section %d: %d records, want %d", i, s.count, counts[i])
		}
	}
	strs := sections(t, table)[0]
	text := string(table[strs.offset : strs.offset+strs.count])
	if strings.ContainsAny(text, "\x1b") || !strings.Contains(text, "x [2J") {
		t.Errorf("the API error's control byte was not made a space: %q", text)
	}
	if strings.Count(text, "n1") != 1 {
		t.Errorf("a repeated name is stored more than once: %q", text)
	}
}

func TestEveryEndpointIsFoundThroughTheIndex(t *testing.T) {
	file := sampleFile()
	table, _ := EncodeTable(file)
	n := uint32(0)
	for _, svc := range file.Services {
		for _, p := range svc.Ports {
			for _, e := range p.Endpoints {
				if got, found := lookup(t, table, 7, netip.MustParseAddr(e.Address), uint16(e.Port)); !found || got != n {
					t.Errorf("%s:%d in the endpoint index: %v, endpoint %d, want %d", e.Address, e.Port, found, got, n)
				}
				n++
			}
		}
	}
}

func TestTheSameFileGivesTheSameTable(t *testing.T) {
	a, _ := EncodeTable(sampleFile())
	b, _ := EncodeTable(sampleFile())
	if string(a) != string(b) {
		t.Error("two encodings of one file differ")
	}
	for text, want := range map[string]string{"10.96.0.300": "is not an IP address",
		"fd00::1%eth0": "has a zone", "": "is not an IP address"} {
		f := sampleFile()
		f.Services[0].ClusterIPs = []string{text}
		if _, err := EncodeTable(f); err == nil || !strings.Contains(err.Error(), "services[0].cluster_ips: ") ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("ClusterIP %q: %v, want %q", text, err, want)
		}
	}
}

// dualStackFile: a Service of both families, its endpoints of both under
// one port, and a node of each.
func dualStackFile() File {
	return File{Format: FileFormat, API: APIStatus{Reachable: true, Since: "2026-11-29T10:00:00Z"},
		Nodes: []Node{{Name: "n4", Tunnel: "10.0.0.4"}, {Name: "n6", Tunnel: "fd00::6"}},
		Services: []Service{{Namespace: "default", Name: "kv", ClusterIPs: []string{"fd00:96::a", "10.96.0.40"},
			Ports: []Port{{Name: "tcp", Port: 7000, Endpoints: []Endpoint{
				{Address: "10.0.4.1", Port: 7001, State: StateReady, Node: "n4", Pod: "kv-0", Rdmagw: true},
				{Address: "fd00:10::1", Port: 7001, State: StateReady, Node: "n6", Pod: "kv-0", Rdmagw: true},
				{Address: "fd00:10::2", Port: 7001, State: StateNotReady, Node: "n6", Pod: "kv-1"}}}}}}}
}

func TestIPv6AddressesAreWrittenAsTheir16Bytes(t *testing.T) {
	table, err := EncodeTable(dualStackFile())
	if err != nil {
		t.Fatal(err)
	}
	// The bytes themselves, not only what they decode to: an IPv6 address
	// in network order, an IPv4 one behind ::ffff.
	s := sections(t, table)
	ips := table[s[2].offset : s[2].offset+2*addressBytes]
	wantIPs := []byte{0xfd, 0, 0, 0x96, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 96, 0, 40}
	if !bytes.Equal(ips, wantIPs) {
		t.Fatalf("ClusterIPs % x\nwant     % x", ips, wantIPs)
	}

	a := netip.MustParseAddr
	want := []tableService{{namespace: "default", name: "kv", clusterIPs: []netip.Addr{a("fd00:96::a"), a("10.96.0.40")},
		ports: []tablePort{{name: "tcp", port: 7000, ready: []uint32{0, 1}, endpoints: []tableEndpoint{
			{address: a("10.0.4.1"), port: 7001, state: 0, flags: endpointHasRdmagw, pod: "kv-0", node: 0},
			{address: a("fd00:10::1"), port: 7001, state: 0, flags: endpointHasRdmagw, pod: "kv-0", node: 1},
			{address: a("fd00:10::2"), port: 7001, state: 2, pod: "kv-1", node: 1}}}}}}
	if got := tableServices(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("services %+v\nwant     %+v", got, want)
	}
	wantNodes := []tableNode{{name: "n4", tunnel: a("10.0.0.4").As16(), flags: nodeHasTunnel},
		{name: "n6", tunnel: a("fd00::6").As16(), flags: nodeHasTunnel}}
	if got := tableNodes(t, table); !reflect.DeepEqual(got, wantNodes) {
		t.Fatalf("nodes %+v\nwant  %+v", got, wantNodes)
	}

	// Either ClusterIP with the port finds the port; each endpoint itself.
	for _, ip := range []string{"fd00:96::a", "10.96.0.40"} {
		if port, found := lookup(t, table, 6, a(ip), 7000); !found || port != 0 {
			t.Errorf("%s:7000 in the ClusterIP index: %v, port %d", ip, found, port)
		}
	}
	for i, ep := range []string{"10.0.4.1", "fd00:10::1", "fd00:10::2"} {
		if got, found := lookup(t, table, 7, a(ep), 7001); !found || got != uint32(i) {
			t.Errorf("%s:7001 in the endpoint index: %v, endpoint %d", ep, found, got)
		}
	}
	// An IPv4 address is not found as the IPv6 address of the same 4 bytes.
	if _, found := lookup(t, table, 7, netip.AddrFrom16([16]byte{12: 10, 14: 4, 15: 1}), 7001); found {
		t.Error("::a00:401 found as 10.0.4.1")
	}

	// A v4-mapped text is the IPv4 address: the same table.
	f := dualStackFile()
	f.Services[0].ClusterIPs[1] = "::ffff:10.96.0.40"
	f.Services[0].Ports[0].Endpoints[0].Address = "::ffff:10.0.4.1"
	f.Nodes[0].Tunnel = "::ffff:10.0.0.4"
	if mapped, err := EncodeTable(f); err != nil || !bytes.Equal(mapped, table) {
		t.Errorf("v4-mapped texts gave another table (%v)", err)
	}
}

func TestEndpointsNameTheirNodeByIndexAndNodesCarryTheirTunnel(t *testing.T) {
	table, err := EncodeTable(sampleFile())
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	mapped := func(a, b, c, d byte) [16]byte {
		return [16]byte{10: 0xff, 11: 0xff, 12: a, 13: b, 14: c, 15: d}
	}
	want := []tableNode{{name: "n1"}, {name: "n2", tunnel: mapped(192, 168, 0, 2), flags: nodeHasTunnel},
		{name: "n3", tunnel: mapped(192, 168, 0, 3), flags: nodeHasTunnel}}
	if got := tableNodes(t, table); !reflect.DeepEqual(got, want) {
		t.Fatalf("nodes %+v\nwant  %+v", got, want)
	}
	// The record's bytes as services_table::NodeRecord lays them out.
	s := sections(t, table)
	n2 := table[s[8].offset+nodeRecordBytes : s[8].offset+2*nodeRecordBytes]
	wantBytes := append(append(append([]byte{}, n2[:8]...), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 0, 2),
		1, 0, 0, 0, 0, 0, 0, 0)
	if !bytes.Equal(n2, wantBytes) {
		t.Fatalf("n2's record % x\nwant           % x", n2, wantBytes)
	}

	// Endpoints in the file's order: redis's two on n1, pg's on n2 and on none.
	for i, node := range []uint32{0, 0, 1, noNode} {
		rec := endpointRecord(t, table, uint32(i))
		if got := le.Uint32(rec[32:]); got != node {
			t.Errorf("endpoint %d: node %#x, want %#x", i, got, node)
		}
		if got := le.Uint32(rec[36:]); got != 0 {
			t.Errorf("endpoint %d: reserved %#x", i, got)
		}
	}
	if pod := tableString(t, table, endpointRecord(t, table, 0)[24:]); pod != "redis-0" {
		t.Errorf("endpoint 0's pod %q", pod)
	}
}

func TestTheNodesSectionDoesNotDependOnTheirOrderInTheFile(t *testing.T) {
	a, _ := EncodeTable(sampleFile())
	f := sampleFile()
	f.Nodes[0], f.Nodes[1] = f.Nodes[1], f.Nodes[0]
	b, _ := EncodeTable(f)
	if !bytes.Equal(a, b) {
		t.Error("the nodes' order in the file changed the table")
	}

	// Names in another order than the endpoints': the records by name, each
	// endpoint naming its own.
	f = File{Format: FileFormat, Nodes: []Node{{Name: "mid", Tunnel: "10.1.0.1"}}, Services: []Service{{Namespace: "a",
		Name: "b", Ports: []Port{{Port: 80, Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 80, State: StateReady,
			Node: "zeta"}, {Address: "10.0.0.2", Port: 80, State: StateReady, Node: "alpha"}}}}}}}
	table, err := EncodeTable(f)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range tableNodes(t, table) {
		names = append(names, n.name)
	}
	if !reflect.DeepEqual(names, []string{"alpha", "mid", "zeta"}) {
		t.Errorf("nodes %v, want alpha, mid, zeta", names)
	}
	for i, want := range []uint32{2, 0} {
		if got := binary.LittleEndian.Uint32(endpointRecord(t, table, uint32(i))[32:]); got != want {
			t.Errorf("endpoint %d names node %d, want %d", i, got, want)
		}
	}

	// No node at all: an empty section, every endpoint naming none.
	f = File{Format: FileFormat, Nodes: []Node{}, Services: []Service{{Namespace: "a", Name: "b",
		Ports: []Port{{Port: 80, Endpoints: []Endpoint{{Address: "10.0.0.1", Port: 80, State: StateReady}}}}}}}
	table, err = EncodeTable(f)
	if err != nil {
		t.Fatal(err)
	}
	if n := sections(t, table)[8].count; n != 0 {
		t.Errorf("%d node records, want none", n)
	}
	if node := binary.LittleEndian.Uint32(endpointRecord(t, table, 0)[32:]); node != noNode {
		t.Errorf("an endpoint without a node names %#x", node)
	}
}

func TestNodesTheTableCannotHoldAreRefused(t *testing.T) {
	cases := map[string]struct {
		nodes []Node
		err   string
	}{
		"no name": {[]Node{{Name: "", Tunnel: "10.0.0.1"}}, "nodes[0]: no name"},
		"twice": {[]Node{{Name: "n3", Tunnel: "10.0.0.1"}, {Name: "n3", Tunnel: "10.0.0.2"}},
			`nodes[1]: "n3" is listed twice`},
		"no tunnel":   {[]Node{{Name: "n3"}}, "nodes[0].tunnel: \"\" is not an IP address"},
		"not address": {[]Node{{Name: "n3", Tunnel: "node-3"}}, "is not an IP address"},
		"zone":        {[]Node{{Name: "n3", Tunnel: "fe80::1%eth0"}}, "nodes[0].tunnel: \"fe80::1%eth0\" has a zone"},
	}
	for name, c := range cases {
		f := sampleFile()
		f.Nodes = c.nodes
		if _, err := EncodeTable(f); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", name, err, c.err)
		}
	}
}

// --table-from reads a file with nodes (as the agent writes it), one
// without (as one written before nodes were), and one with IPv6 addresses.
func TestTableFromReadsTheNodes(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"with": `{"format": "rdmagw-services/1", "api": {"reachable": true, "since": "2026-11-29T10:00:00Z"},
			"nodes": [{"name": "n1", "tunnel": "192.168.0.1"}],
			"services": [{"namespace": "a", "name": "b", "cluster_ips": ["10.96.0.1"], "ports": [{"port": 80, "endpoints": [
				{"address": "10.0.0.1", "port": 8080, "state": "ready", "node": "n1", "pod": "b-0", "rdmagw": false}]}]}]}`,
		"without": `{"format": "rdmagw-services/1", "api": {"reachable": true, "since": "2026-11-29T10:00:00Z"},
			"services": [{"namespace": "a", "name": "b", "cluster_ips": ["10.96.0.1"], "ports": [{"port": 80, "endpoints": [
				{"address": "10.0.0.1", "port": 8080, "state": "ready", "node": "n1", "pod": "b-0", "rdmagw": false}]}]}]}`,
		"ipv6": `{"format": "rdmagw-services/1", "api": {"reachable": true, "since": "2026-11-29T10:00:00Z"},
			"nodes": [{"name": "n1", "tunnel": "fd00::1"}],
			"services": [{"namespace": "a", "name": "b", "cluster_ips": ["fd00:96::1", "10.96.0.1"], "ports": [{"port": 80,
				"endpoints": [{"address": "fd00:10::1", "port": 8080, "state": "ready", "node": "n1", "pod": "b-0",
				"rdmagw": false}]}]}]}`,
	} {
		from, to := filepath.Join(dir, name+".json"), filepath.Join(dir, name+".table")
		if err := os.WriteFile(from, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if rc := run([]string{"--table-from", from, "--table", to}); rc != 0 {
			t.Fatalf("%s: exit %d", name, rc)
		}
		table, err := os.ReadFile(to)
		if err != nil {
			t.Fatal(err)
		}
		want := []tableNode{{name: "n1"}}
		switch name {
		case "with":
			want[0].tunnel, want[0].flags = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 15: 1}, nodeHasTunnel
		case "ipv6":
			want[0].tunnel, want[0].flags = [16]byte{0: 0xfd, 15: 1}, nodeHasTunnel
			if eps := tableServices(t, table)[0].ports[0].endpoints; eps[0].address != netip.MustParseAddr("fd00:10::1") {
				t.Errorf("ipv6: endpoint %+v", eps[0])
			}
		}
		if got := tableNodes(t, table); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: nodes %+v, want %+v", name, got, want)
		}
		if node := binary.LittleEndian.Uint32(endpointRecord(t, table, 0)[32:]); node != 0 {
			t.Errorf("%s: the endpoint names node %#x, want 0", name, node)
		}
	}
}
