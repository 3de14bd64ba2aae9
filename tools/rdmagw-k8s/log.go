// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

var logMu sync.Mutex

// logEvent writes one line in rdmagw's log format (docs/logging.md): time,
// level, event=, then key=value pairs, a value quoted when it would not read
// back as one token.
func logEvent(level, event string, kv ...any) {
	var b strings.Builder
	b.WriteString(time.Now().UTC().Format("2006-01-02T15:04:05.000Z"))
	b.WriteString(" " + level + " event=" + event)
	for i := 0; i+1 < len(kv); i += 2 {
		b.WriteString(fmt.Sprintf(" %v=", kv[i]))
		switch v := kv[i+1].(type) {
		case bool:
			if v {
				b.WriteString("1")
			} else {
				b.WriteString("0")
			}
		default:
			b.WriteString(quoteValue(fmt.Sprint(v)))
		}
	}
	b.WriteString("\n")
	logMu.Lock()
	defer logMu.Unlock()
	os.Stderr.WriteString(b.String())
}

func quoteValue(s string) string {
	plain := s != ""
	for _, r := range s {
		if r <= ' ' || r == '"' || r == '=' || r == '\\' || r == 0x7f || r > 0x7f {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString("\\n")
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}
