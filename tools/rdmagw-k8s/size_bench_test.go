// SPDX-License-Identifier: Apache-2.0
package main

import (
	"encoding/json"
	"fmt"
	"testing"
)

// largeFile is a cluster's file: 10,000 Services of 10 endpoints.
func largeFile() File {
	f := File{Format: FileFormat, API: APIStatus{Reachable: true, Since: "2026-11-29T00:00:00Z"}}
	for s := 0; s < 10000; s++ {
		svc := Service{Namespace: fmt.Sprintf("team-%02d", s%50), Name: fmt.Sprintf("svc-%05d", s),
			ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", s/250, s%250+1)}}
		port := Port{Name: "http", Port: 80}
		for e := 0; e < 10; e++ {
			i := s*10 + e
			port.Endpoints = append(port.Endpoints, Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", 64+i/65536, i/256%256, i%256|1),
				Port: 8080, State: StateReady, Node: fmt.Sprintf("node-%03d", i%100), Pod: fmt.Sprintf("svc-%05d-%d", s, e)})
		}
		svc.Ports = []Port{port}
		f.Services = append(f.Services, svc)
	}
	return f
}

// go test -run XXX -bench . : what each change costs the agent at this size.
func BenchmarkMarshalIndent(b *testing.B) {
	f := largeFile()
	for i := 0; i < b.N; i++ {
		if _, err := json.MarshalIndent(f, "", " "); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMarshal(b *testing.B) {
	f := largeFile()
	for i := 0; i < b.N; i++ {
		if _, err := json.Marshal(f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeTable(b *testing.B) {
	f := largeFile()
	for i := 0; i < b.N; i++ {
		if _, err := EncodeTable(f); err != nil {
			b.Fatal(err)
		}
	}
}
