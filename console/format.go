package console

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// ago formats a duration the way operators read it: 850ms, 12s, 3m5s,
// 2h4m, 3d2h.
func ago(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", d/time.Minute, (d%time.Minute)/time.Second)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, (d%time.Hour)/time.Minute)
	default:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), (d%(24*time.Hour))/time.Hour)
	}
}

func formatPct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// payloadText returns a payload as text for a <pre>: indented JSON when it
// is JSON, valid UTF-8 as it is, anything else as base64. The template
// escapes it.
func payloadText(p []byte) string {
	if p == nil {
		return ""
	}
	if json.Valid(p) {
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") == nil {
			return b.String()
		}
	}
	if utf8.Valid(p) {
		return string(p)
	}
	return "base64: " + base64.StdEncoding.EncodeToString(p)
}

// hexShort shows the first bytes of a hash.
func hexShort(b []byte) string {
	if len(b) > 8 {
		return hex.EncodeToString(b[:8]) + "…"
	}
	return hex.EncodeToString(b)
}

// nonce returns 16 random bytes, encoded.
func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
