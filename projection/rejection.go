package projection

import (
	"crypto/sha256"
	"errors"
	"strconv"

	"github.com/inorder/inorder/aggregate"
)

// This file holds rejections: the deliveries a batch refuses (invalid, or
// unstorable), each with its fingerprint, reason and count, as the gate
// records them.

// rejection is an invalid delivery to record.
type rejection struct {
	fingerprint []byte
	source      string
	ev          aggregate.Event
	reason      string
	err         string
	count       int64
}

// ReasonUnstorable is the reason code of rejected deliveries the database
// refused to store (see UnstorableError).
const ReasonUnstorable = "unstorable"

func newRejection(source string, e aggregate.Event, err error) rejection {
	reason := aggregate.Reason(err)
	var uerr *UnstorableError
	if errors.As(err, &uerr) {
		reason = ReasonUnstorable
	}
	return rejection{fingerprint: rejectedFingerprint(e), source: source, ev: e, reason: reason, err: err.Error(), count: 1}
}

// rejectedFingerprint identifies a rejected delivery by what was delivered
// alone — not by its source or the error found — so that one bad event is
// one row however often, and by whichever path (a worker, a repair, a
// replay), it arrives: the SHA-256 of its event id, aggregate, version,
// type, content type, data and metadata, each followed by a NUL byte. The
// migration to 007 computes the same hash in SQL.
func rejectedFingerprint(e aggregate.Event) []byte {
	h := sha256.New()
	for _, s := range []string{e.ID, e.Aggregate, strconv.FormatInt(e.Version, 10), e.Type, e.ContentType} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, b := range [][]byte{e.Data, e.Metadata} {
		h.Write(b)
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

func dedupeRejections(rs []rejection) []rejection {
	seen := map[string]int{}
	out := rs[:0]
	for _, r := range rs {
		if i, ok := seen[string(r.fingerprint)]; ok {
			out[i].count += r.count
			continue
		}
		seen[string(r.fingerprint)] = len(out)
		out = append(out, r)
	}
	return out
}
