// SPDX-License-Identifier: Apache-2.0
package main

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
	"testing"
)

func sampleFile() File {
	ep := Endpoint{Address: "10.0.1.1", Port: 6380, State: StateReady, Node: "n1", Pod: "redis-0", Rdmagw: true}
	return File{Format: FileFormat, API: APIStatus{Reachable: false, Since: "2026-11-29T10:00:00Z", Error: "x\x1b[2J"},
		Services: []Service{
			{Namespace: "default", Name: "redis", ClusterIPs: []string{"10.96.0.10"}, Ports: []Port{{Name: "redis", Port: 6379,
				Endpoints: []Endpoint{ep, {Address: "10.0.1.2", Port: 6380, State: StateNotReady, Node: "n1", Pod: "redis-1"}}}}},
			{Namespace: "db", Name: "pg", Ports: []Port{{Port: 5432, Endpoints: []Endpoint{{Address: "10.0.2.1", Port: 5432,
				State: StateTerminating, Node: "n2"}}}}},
		}}
}

type section struct{ offset, count uint32 }

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
	sizes := []int{1, serviceRecordBytes, addressBytes, portRecordBytes, endpointBytes, 4, slotBytes, slotBytes}
	counts := []uint32{0, 2, 1, 2, 3, 1, 2, 4} // indexes: a power of two above 5/4 of the keys
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
