// SPDX-License-Identifier: Apache-2.0

// goecho is perf/peers' Go application: built with CGO_ENABLED=0 it is a
// static binary with no libc, so an LD_PRELOAD library has nothing to hook.
// It speaks the same protocol as echo.py (an echo server, and a client that
// measures 64-byte round trips and echoed bulk checked byte for byte) and
// prints the same JSON line.
//
//	goecho server PORT
//	goecho client HOST PORT SECONDS
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"sort"
	"strconv"
	"time"
)

func serve(port string) error {
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	fmt.Println("listening", port)
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// pingPong sends 64-byte messages one at a time for the given time and
// returns each round trip.
func pingPong(addr string, d time.Duration) ([]time.Duration, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	msg := bytes.Repeat([]byte{'p'}, 64)
	reply := make([]byte, 64)
	var rtts []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) && len(rtts) < 1000000 {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			return rtts, err
		}
		if _, err := io.ReadFull(c, reply); err != nil {
			return rtts, err
		}
		rtts = append(rtts, time.Since(t0))
	}
	return rtts, nil
}

// period is the length of the pattern bulk sends over and over: a prime,
// so that bytes lost, repeated or out of order show at any granularity a
// transport could get wrong (whole buffers, frames, pages).
const period = 65537

// bulk sends the pattern for the given time while reading the echo and
// comparing it with what was sent, byte for byte (cheaper than a digest:
// under emulation a SHA-256 would measure the client, not the path).
func bulk(addr string, d time.Duration) (int64, time.Duration, bool, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, 0, false, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(d + 60*time.Second))
	pattern := make([]byte, 2*period)
	rand.New(rand.NewSource(1)).Read(pattern[:period])
	copy(pattern[period:], pattern[:period])
	type result struct {
		n    int64
		same bool
		err  error
	}
	got := make(chan result, 1)
	go func() {
		buf := make([]byte, 256*1024)
		var n int64
		same := true
		for {
			k, err := c.Read(buf)
			for off := 0; off < k; {
				at := int((n + int64(off)) % period)
				m := min(k-off, period)
				same = same && bytes.Equal(buf[off:off+m], pattern[at:at+m])
				off += m
			}
			n += int64(k)
			if err == io.EOF {
				got <- result{n, same, nil}
				return
			}
			if err != nil {
				got <- result{n, same, err}
				return
			}
		}
	}()
	var total int64
	t0 := time.Now()
	for time.Since(t0) < d {
		at := int(total % period)
		k, err := c.Write(pattern[at : at+64*1024])
		total += int64(k)
		if err != nil {
			return total, time.Since(t0), false, err
		}
	}
	c.(*net.TCPConn).CloseWrite()
	r := <-got
	elapsed := time.Since(t0)
	return r.n, elapsed, r.same && r.n == total, r.err
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

func client(host, port, secs string) error {
	s, err := strconv.ParseFloat(secs, 64)
	if err != nil {
		return err
	}
	addr := net.JoinHostPort(host, port)
	d := time.Duration(s * float64(time.Second))
	out := map[string]any{}
	rtts, err := pingPong(addr, d)
	if err != nil {
		out["error"] = "ping-pong: " + err.Error()
	}
	if len(rtts) > 0 {
		sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
		out["round_trips"] = len(rtts)
		out["p50_us"] = float64(rtts[len(rtts)/2].Microseconds())
		out["p99_us"] = float64(rtts[len(rtts)*99/100].Microseconds())
	}
	if err == nil {
		n, elapsed, same, err := bulk(addr, d)
		out["bulk_bytes"] = n
		out["mib_s"] = float64(n) / (1 << 20) / elapsed.Seconds()
		out["bytes_ok"] = same
		if err != nil {
			out["error"] = "bulk: " + err.Error()
		}
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if _, failed := out["error"]; failed {
		os.Exit(1)
	}
	return nil
}

func main() {
	var err error
	switch {
	case len(os.Args) == 3 && os.Args[1] == "server":
		err = serve(os.Args[2])
	case len(os.Args) == 5 && os.Args[1] == "client":
		err = client(os.Args[2], os.Args[3], os.Args[4])
	default:
		fmt.Fprintln(os.Stderr, "usage: goecho server PORT | goecho client HOST PORT SECONDS")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "goecho:", err)
		os.Exit(1)
	}
}
