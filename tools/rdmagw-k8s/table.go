// SPDX-License-Identifier: Apache-2.0
package main

// The services table: the services file's content in the binary layout
// that sidecars map read-only and look destinations up in place
// (docs/kubernetes.md, "The services table"; the layout's definition is
// config/services_table_format.h, which a change here must follow).

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"net/netip"
	"sort"
)

const (
	tableVersion       = 2
	tableHeaderBytes   = 120
	tableSections      = 9
	checksummedFrom    = 16 // the header's file_bytes field: everything after the checksum
	apiReachableFlag   = 1
	endpointHasRdmagw  = 1
	nodeHasTunnel      = 1
	noNode             = 0xFFFFFFFF // an endpoint's node index when it names none
	serviceRecordBytes = 32
	addressBytes       = 16
	portRecordBytes    = 32
	endpointBytes      = 40
	nodeRecordBytes    = 32
	slotBytes          = 24
)

var tableMagic = []byte("RDMGWSVC")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type stringRef struct{ offset, length uint32 }

type tableWriter struct {
	strings  []byte
	interned map[string]stringRef
}

// add stores s without looking for it: for text that does not repeat (pod
// names), which would only grow the map.
func (w *tableWriter) add(s string) stringRef {
	r := stringRef{uint32(len(w.strings)), uint32(len(s))}
	w.strings = append(w.strings, s...)
	return r
}

// record extends *buf by its next n bytes, within the capacity reserved
// for it (zero, as make left them), and returns them.
func record(buf *[]byte, n int) []byte {
	at := len(*buf)
	*buf = (*buf)[:at+n]
	return (*buf)[at : at+n]
}

func (w *tableWriter) intern(s string) stringRef {
	if r, ok := w.interned[s]; ok {
		return r
	}
	r := stringRef{uint32(len(w.strings)), uint32(len(s))}
	w.strings = append(w.strings, s...)
	w.interned[s] = r
	return r
}

// The agent's words may quote the server: the table holds no control byte.
func cleanText(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c == 0x7f {
			b[i] = ' '
		}
	}
	return string(b)
}

type indexKey struct {
	addr [16]byte
	port uint16
}

// slotHash is FNV-1a (64 bits) of the address's 16 bytes and the port's 2
// (little-endian), as services_table::slot_hash.
func slotHash(k indexKey) uint64 {
	h := uint64(0xcbf29ce484222325)
	mix := func(b byte) { h = (h ^ uint64(b)) * 0x100000001b3 }
	for _, b := range k.addr {
		mix(b)
	}
	mix(byte(k.port))
	mix(byte(k.port >> 8))
	return h
}

type slot struct {
	key   indexKey
	used  bool
	value uint32
}

// newIndex is a power of two above 5/4 of the keys (at most 80% used), as
// the C++ builder's: searches stay short, and a free slot always ends one.
func newIndex(keys int) []slot {
	if keys == 0 {
		return nil
	}
	return make([]slot, 1<<bits.Len(uint(keys+keys/4)))
}

// insert keeps the first value of a key.
func insert(index []slot, k indexKey, value uint32) {
	mask := uint64(len(index) - 1)
	for i := slotHash(k) & mask; ; i = (i + 1) & mask {
		if !index[i].used {
			index[i] = slot{k, true, value}
			return
		}
		if index[i].key == k {
			return
		}
	}
}

// addressKey is an address's 16 bytes: IPv6 as itself, IPv4 as
// ::ffff:a.b.c.d, which makes a v4-mapped address's text and its IPv4
// text one key, as they are one address to a sidecar.
func addressKey(text string) ([16]byte, error) {
	a, err := netip.ParseAddr(text)
	if err != nil {
		return [16]byte{}, fmt.Errorf("%q is not an IP address", text)
	}
	if a.Zone() != "" {
		// As16 would drop it: the table would hold another address than
		// the file.
		return [16]byte{}, fmt.Errorf("%q has a zone, which the table cannot hold", text)
	}
	return a.As16(), nil
}

var stateCodes = map[string]uint8{StateReady: 0, StateTerminating: 1, StateNotReady: 2}

// EncodeTable lays out f as a services table.
func EncodeTable(f File) ([]byte, error) {
	// Every section's size first: each is allocated once (at 10,000
	// Services of 10 endpoints, growing them cost more than filling them).
	nServices, nIPs, nPorts, nEndpoints, nClusterKeys := len(f.Services), 0, 0, 0, 0
	for _, s := range f.Services {
		nIPs += len(s.ClusterIPs)
		nPorts += len(s.Ports)
		nClusterKeys += len(s.ClusterIPs) * len(s.Ports)
		for _, p := range s.Ports {
			nEndpoints += len(p.Endpoints)
		}
	}
	w := &tableWriter{interned: map[string]stringRef{}, strings: make([]byte, 0, 64+nEndpoints*32)}
	le := binary.LittleEndian
	since, apiError := w.intern(cleanText(f.API.Since)), w.intern(cleanText(f.API.Error))

	services := make([]byte, 0, nServices*serviceRecordBytes)
	clusterIPs := make([]byte, 0, nIPs*addressBytes)
	ports := make([]byte, 0, nPorts*portRecordBytes)
	endpoints := make([]byte, 0, nEndpoints*endpointBytes)
	ready := make([]byte, 0, nEndpoints*4)
	type keyed struct {
		key   indexKey
		value uint32
	}
	clusterKeys, endpointKeys := make([]keyed, 0, nClusterKeys), make([]keyed, 0, nEndpoints)
	// An endpoint's node is an index into the nodes section, which is in
	// name order: known only once every name is, so the records get the
	// name's order of appearance first (nodeIDs), rewritten at the end.
	nodeIDs := map[string]uint32{}
	var nodeNames []string
	nodeID := func(name string) uint32 {
		id, ok := nodeIDs[name]
		if !ok {
			id = uint32(len(nodeNames))
			nodeIDs[name] = id
			nodeNames = append(nodeNames, name)
		}
		return id
	}
	nPorts, nEndpoints, nIPs = 0, 0, 0 // now the next record of each
	for si, s := range f.Services {
		rec := record(&services, serviceRecordBytes)
		ns, name := w.intern(s.Namespace), w.intern(s.Name)
		le.PutUint32(rec[0:], ns.offset)
		le.PutUint32(rec[4:], ns.length)
		le.PutUint32(rec[8:], name.offset)
		le.PutUint32(rec[12:], name.length)
		le.PutUint32(rec[16:], uint32(nIPs))
		le.PutUint32(rec[20:], uint32(len(s.ClusterIPs)))
		le.PutUint32(rec[24:], uint32(nPorts))
		le.PutUint32(rec[28:], uint32(len(s.Ports)))
		ips := make([][16]byte, 0, len(s.ClusterIPs))
		for _, text := range s.ClusterIPs {
			a, err := addressKey(text)
			if err != nil {
				return nil, fmt.Errorf("services[%d].cluster_ips: %w", si, err)
			}
			ips = append(ips, a)
			clusterIPs = append(clusterIPs, a[:]...)
			nIPs++
		}
		for pi, p := range s.Ports {
			if p.Port < 1 || p.Port > 65535 {
				return nil, fmt.Errorf("services[%d].ports[%d]: port %d", si, pi, p.Port)
			}
			rec := record(&ports, portRecordBytes)
			pname := w.intern(p.Name)
			le.PutUint32(rec[0:], uint32(si))
			le.PutUint32(rec[4:], pname.offset)
			le.PutUint32(rec[8:], pname.length)
			le.PutUint16(rec[12:], uint16(p.Port))
			le.PutUint32(rec[16:], uint32(nEndpoints))
			le.PutUint32(rec[20:], uint32(len(p.Endpoints)))
			le.PutUint32(rec[24:], uint32(len(ready)/4))
			readyCount := uint32(0)
			for _, a := range ips {
				clusterKeys = append(clusterKeys, keyed{indexKey{a, uint16(p.Port)}, uint32(nPorts)})
			}
			for ei, e := range p.Endpoints {
				a, err := addressKey(e.Address)
				if err != nil {
					return nil, fmt.Errorf("services[%d].ports[%d].endpoints[%d].address: %w", si, pi, ei, err)
				}
				state, ok := stateCodes[e.State]
				if !ok || e.Port < 1 || e.Port > 65535 {
					return nil, fmt.Errorf("services[%d].ports[%d].endpoints[%d]: state %q, port %d", si, pi, ei, e.State, e.Port)
				}
				erec := record(&endpoints, endpointBytes)
				copy(erec[0:16], a[:])
				le.PutUint16(erec[16:], uint16(e.Port))
				erec[18] = state
				if e.Rdmagw {
					erec[19] = endpointHasRdmagw
				}
				le.PutUint32(erec[20:], uint32(nPorts))
				pod := w.add(e.Pod)
				le.PutUint32(erec[24:], pod.offset)
				le.PutUint32(erec[28:], pod.length)
				node := uint32(noNode)
				if e.Node != "" {
					node = nodeID(e.Node)
				}
				le.PutUint32(erec[32:], node)
				endpointKeys = append(endpointKeys, keyed{indexKey{a, uint16(e.Port)}, uint32(nEndpoints)})
				if state == stateCodes[StateReady] {
					ready = le.AppendUint32(ready, uint32(nEndpoints))
					readyCount++
				}
				nEndpoints++
			}
			le.PutUint32(rec[28:], readyCount)
			nPorts++
		}
	}
	// The nodes with a tunnel join those the endpoints name; a name twice
	// would give a node's endpoints two records to choose from.
	tunnels := make(map[string][16]byte, len(f.Nodes))
	for ni, n := range f.Nodes {
		if n.Name == "" {
			return nil, fmt.Errorf("nodes[%d]: no name", ni)
		}
		if _, twice := tunnels[n.Name]; twice {
			return nil, fmt.Errorf("nodes[%d]: %q is listed twice", ni, n.Name)
		}
		a, err := addressKey(n.Tunnel)
		if err != nil {
			return nil, fmt.Errorf("nodes[%d].tunnel: %w", ni, err)
		}
		tunnels[n.Name] = a
		nodeID(n.Name)
	}
	byName := make([]uint32, len(nodeNames)) // the records' order: ids by name
	for i := range byName {
		byName[i] = uint32(i)
	}
	sort.Slice(byName, func(i, j int) bool { return nodeNames[byName[i]] < nodeNames[byName[j]] })
	nodeIndex := make([]uint32, len(nodeNames)) // id -> record
	nodes := make([]byte, 0, len(nodeNames)*nodeRecordBytes)
	for i, id := range byName {
		nodeIndex[id] = uint32(i)
		rec := record(&nodes, nodeRecordBytes)
		name := w.intern(nodeNames[id])
		le.PutUint32(rec[0:], name.offset)
		le.PutUint32(rec[4:], name.length)
		if a, ok := tunnels[nodeNames[id]]; ok {
			copy(rec[8:24], a[:])
			le.PutUint32(rec[24:], nodeHasTunnel)
		}
	}
	for at := 0; at < len(endpoints); at += endpointBytes {
		if id := le.Uint32(endpoints[at+32:]); id != noNode {
			le.PutUint32(endpoints[at+32:], nodeIndex[id])
		}
	}

	encodeIndex := func(keys []keyed) []byte {
		index := newIndex(len(keys))
		for _, k := range keys {
			insert(index, k.key, k.value)
		}
		out := make([]byte, len(index)*slotBytes)
		for i, s := range index {
			if !s.used {
				continue
			}
			rec := out[i*slotBytes:]
			copy(rec[0:16], s.key.addr[:])
			le.PutUint16(rec[16:], s.key.port)
			le.PutUint16(rec[18:], 1)
			le.PutUint32(rec[20:], s.value)
		}
		return out
	}
	clusterIndex, endpointIndex := encodeIndex(clusterKeys), encodeIndex(endpointKeys)

	// Sections in the order of services_table::SectionIndex, each at a
	// multiple of 8; count is records (bytes for the strings).
	sections := []struct {
		data  []byte
		count int
	}{
		{w.strings, len(w.strings)},
		{services, len(services) / serviceRecordBytes},
		{clusterIPs, len(clusterIPs) / addressBytes},
		{ports, len(ports) / portRecordBytes},
		{endpoints, len(endpoints) / endpointBytes},
		{ready, len(ready) / 4},
		{clusterIndex, len(clusterIndex) / slotBytes},
		{endpointIndex, len(endpointIndex) / slotBytes},
		{nodes, len(nodes) / nodeRecordBytes},
	}
	align := func(n int) int { return (n + 7) &^ 7 }
	header := make([]byte, tableHeaderBytes)
	copy(header, tableMagic)
	le.PutUint32(header[8:], tableVersion)
	flags := uint32(0)
	if f.API.Reachable {
		flags = apiReachableFlag
	}
	le.PutUint32(header[24:], flags)
	le.PutUint32(header[32:], since.offset)
	le.PutUint32(header[36:], since.length)
	le.PutUint32(header[40:], apiError.offset)
	le.PutUint32(header[44:], apiError.length)
	at := tableHeaderBytes
	for i, s := range sections {
		at = align(at)
		le.PutUint32(header[48+8*i:], uint32(at))
		le.PutUint32(header[52+8*i:], uint32(s.count))
		at += len(s.data)
	}
	total := align(at)
	if total > 64<<20 {
		return nil, fmt.Errorf("the table would be %d bytes, more than a sidecar reads (64 MiB)", total)
	}
	out := make([]byte, total)
	copy(out, header)
	for i, s := range sections {
		copy(out[le.Uint32(header[48+8*i:]):], s.data)
	}
	le.PutUint64(out[16:], uint64(total))
	le.PutUint32(out[12:], crc32.Checksum(out[checksummedFrom:], castagnoli))
	return out, nil
}
