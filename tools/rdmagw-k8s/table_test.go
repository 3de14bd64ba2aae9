// SPDX-License-Identifier: Apache-2.0
package main

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
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
	s := sections(t, table)
	index := table[s[7].offset : s[7].offset+s[7].count*slotBytes]
	le := binary.LittleEndian
	n := uint64(s[7].count)
	for _, svc := range file.Services {
		for _, p := range svc.Ports {
			for _, e := range p.Endpoints {
				addr, _ := addressKey(e.Address)
				k := indexKey{addr, uint16(e.Port)}
				found := false
				for i, probes := slotHash(k)&(n-1), uint64(0); probes < n; i, probes = (i+1)&(n-1), probes+1 {
					slot := index[i*slotBytes:]
					if le.Uint16(slot[18:]) == 0 {
						break
					}
					if string(slot[:16]) == string(addr[:]) && le.Uint16(slot[16:]) == k.port {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("%s:%d not in the endpoint index", e.Address, e.Port)
				}
			}
		}
	}
}

func TestTheSameFileGivesTheSameTableAndAnIPv6AddressIsRefused(t *testing.T) {
	a, _ := EncodeTable(sampleFile())
	b, _ := EncodeTable(sampleFile())
	if string(a) != string(b) {
		t.Error("two encodings of one file differ")
	}
	f := sampleFile()
	f.Services[0].ClusterIPs = []string{"fd00::1"}
	if _, err := EncodeTable(f); err == nil || !strings.Contains(err.Error(), "not an IPv4 address") {
		t.Errorf("an IPv6 ClusterIP: %v", err)
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
		"IPv6":        {[]Node{{Name: "n3", Tunnel: "fd00::1"}}, "nodes[0].tunnel: \"fd00::1\" is not an IPv4 address"},
		"no tunnel":   {[]Node{{Name: "n3"}}, "nodes[0].tunnel: \"\" is not an IPv4 address"},
		"v4-mapped":   {[]Node{{Name: "n3", Tunnel: "::ffff:10.0.0.1"}}, "is not an IPv4 address"},
		"not address": {[]Node{{Name: "n3", Tunnel: "node-3"}}, "is not an IPv4 address"},
	}
	for name, c := range cases {
		f := sampleFile()
		f.Nodes = c.nodes
		if _, err := EncodeTable(f); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %v, want %q", name, err, c.err)
		}
	}
}

// --table-from reads a file with nodes (as the agent writes it) and one
// without (as one written before nodes were).
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
		if name == "with" {
			want[0].tunnel, want[0].flags = [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 15: 1}, nodeHasTunnel
		}
		if got := tableNodes(t, table); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: nodes %+v, want %+v", name, got, want)
		}
		if node := binary.LittleEndian.Uint32(endpointRecord(t, table, 0)[32:]); node != 0 {
			t.Errorf("%s: the endpoint names node %#x, want 0", name, node)
		}
	}
}
