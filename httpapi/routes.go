package httpapi

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inorder/inorder/internal/retry"
	"github.com/inorder/inorder/projection"
)

// validText reports whether s may be passed to the database as an id,
// cursor or filter value: bounded, valid UTF-8, no NUL (which Postgres text
// cannot hold).
func validText(s string) bool {
	return len(s) <= MaxParamBytes && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

const textRule = "must be at most 512 bytes of valid UTF-8 without NUL"

// params parses the query string strictly. It returns a message for the
// client when the query is malformed, names a parameter allowed rejects, or
// gives one twice.
func params(r *http.Request, allowed func(string) bool) (map[string]string, string) {
	vs, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, "the query string is malformed"
	}
	out := make(map[string]string, len(vs))
	for k, v := range vs {
		if !allowed(k) {
			return nil, "unknown query parameter"
		}
		if len(v) != 1 {
			return nil, "a query parameter is given more than once"
		}
		out[k] = v[0]
	}
	return out, ""
}

// reader returns the named projection's Reader, or answers the request.
func (h *handler) reader(w http.ResponseWriter, name string) (projection.Reader, bool) {
	rd, err := h.proc.Reader(name)
	switch {
	case err == nil:
		return rd, true
	case errors.Is(err, projection.ErrUnknownProjection):
		writeError(w, http.StatusNotFound, CodeUnknownProjection, "unknown projection; see GET /v1/projections")
	case errors.Is(err, projection.ErrNoReader):
		writeError(w, http.StatusNotFound, CodeNoReader, "this projection does not serve its read model")
	default:
		writeError(w, http.StatusInternalServerError, CodeInternal, "internal error")
	}
	return nil, false
}

// respond writes a successful answer, logging a value that cannot be
// encoded.
func (h *handler) respond(w http.ResponseWriter, r *http.Request, v any) {
	if err := writeJSON(w, http.StatusOK, v); err != nil {
		h.log.ErrorContext(r.Context(), "http api encode response", "path", r.URL.Path, "error", err)
	}
}

func (h *handler) emptyID(w http.ResponseWriter, r *http.Request) {
	if _, ok := h.reader(w, r.PathValue("name")); !ok {
		return
	}
	writeError(w, http.StatusBadRequest, CodeBadRequest, "the aggregate id is empty")
}

// aggregate serves one aggregate's read model, waiting for ?min_version=.
func (h *handler) aggregate(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("name"), r.PathValue("id")
	if _, ok := h.reader(w, name); !ok {
		return
	}
	if id == "" || !validText(id) {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "the aggregate id "+textRule)
		return
	}
	q, msg := params(r, func(k string) bool { return k == "min_version" || k == "timeout" })
	if msg != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, msg+"; accepted: min_version, timeout")
		return
	}
	var minVersion int64
	if s, ok := q["min_version"]; ok {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 {
			writeError(w, http.StatusBadRequest, CodeBadMinVersion, "min_version must be an integer from 0 to 9223372036854775807")
			return
		}
		minVersion = v
	}
	wait := h.opts.MaxWait
	if s, ok := q["timeout"]; ok {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > h.opts.MaxWait {
			writeError(w, http.StatusBadRequest, CodeBadRequest,
				"timeout must be a positive duration of at most "+h.opts.MaxWait.String()+" (the server's longest wait), such as 500ms or 2s")
			return
		}
		wait = d
	}

	deadline := time.Now().Add(wait)
	// Polls until the deadline, which the loop checks itself.
	bo := retry.Policy{Initial: minBackoff, Max: maxBackoff, MaxElapsed: -1}.Start()
	waiting := false
	for {
		if minVersion > 0 {
			v, err := h.version(r.Context(), name, id)
			if err != nil {
				h.fail(w, r, "version", err)
				return
			}
			if v < minVersion {
				left := time.Until(deadline)
				if left <= 0 {
					w.Header().Set(VersionHeader, strconv.FormatInt(v, 10))
					_ = writeJSON(w, http.StatusGatewayTimeout, ErrorBody{Error{
						Code:           CodeTimeout,
						Message:        "the projection did not reach min_version in time; retry later",
						CurrentVersion: &v,
						MinVersion:     &minVersion,
					}})
					return
				}
				if !waiting && h.onWait != nil {
					h.onWait()
				}
				waiting = true
				d, _ := bo.Next()
				if err := retry.Sleep(r.Context(), min(d, left)); err != nil {
					h.fail(w, r, "wait for min_version", err)
					return
				}
				continue
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), h.opts.RequestTimeout)
		view, err := h.proc.ReadAggregate(ctx, name, id)
		cancel()
		if err != nil {
			h.fail(w, r, "read aggregate", err)
			return
		}
		if view.Version < minVersion {
			continue // a rebuild reset the version since it was polled
		}
		w.Header().Set(VersionHeader, strconv.FormatInt(view.Version, 10))
		if !view.Found {
			writeError(w, http.StatusNotFound, CodeNotFound, "the projection holds no read model for this aggregate")
			return
		}
		h.respond(w, r, AggregateResponse{Projection: name, Aggregate: id, Version: view.Version, Data: view.Value})
		return
	}
}

func (h *handler) version(ctx context.Context, name, id string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.RequestTimeout)
	defer cancel()
	return h.proc.Version(ctx, name, id)
}

// list serves a page of read models.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	rd, ok := h.reader(w, name)
	if !ok {
		return
	}
	filters := slices.Sorted(slices.Values(rd.Filters()))
	q, msg := params(r, func(k string) bool { return k == "limit" || k == "after" || slices.Contains(filters, k) })
	if msg != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, msg+"; accepted: limit, after, "+strings.Join(filters, ", "))
		return
	}
	lq := projection.ListQuery{Limit: DefaultLimit, Filters: map[string]string{}}
	for k, v := range q {
		switch k {
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxLimit {
				writeError(w, http.StatusBadRequest, CodeBadRequest, "limit must be an integer from 1 to "+strconv.Itoa(MaxLimit))
				return
			}
			lq.Limit = n
		case "after":
			if !validText(v) {
				writeError(w, http.StatusBadRequest, CodeBadRequest, "after "+textRule)
				return
			}
			lq.After = v
		default:
			if !validText(v) {
				writeError(w, http.StatusBadRequest, CodeBadRequest, "a filter value "+textRule)
				return
			}
			lq.Filters[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.RequestTimeout)
	defer cancel()
	items, next, err := h.proc.ReadList(ctx, name, lq)
	if errors.Is(err, projection.ErrUnknownFilter) {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "unknown filter; accepted: "+strings.Join(filters, ", "))
		return
	}
	if err != nil {
		h.fail(w, r, "list", err)
		return
	}
	if items == nil {
		items = []any{}
	}
	h.respond(w, r, ListResponse{Projection: name, Items: items, Next: next})
}

// infos returns the description of every projection.
func (h *handler) infos(ctx context.Context) ([]ProjectionInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, h.opts.RequestTimeout)
	defer cancel()
	st, err := h.proc.Status(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]ProjectionInfo, len(st.Projections))
	for i, s := range st.Projections {
		out[i] = ProjectionInfo{ProjectionStatus: s, Filters: []string{}}
		if rd, err := h.proc.Reader(s.Name); err == nil {
			out[i].Readable = true
			out[i].Filters = slices.Sorted(slices.Values(rd.Filters()))
		}
	}
	return out, nil
}

func (h *handler) projections(w http.ResponseWriter, r *http.Request) {
	if infos, ok := h.serveInfos(w, r); ok {
		h.respond(w, r, ProjectionsResponse{Projections: infos})
	}
}

func (h *handler) projectionInfo(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !slices.Contains(h.proc.Projections(), name) {
		writeError(w, http.StatusNotFound, CodeUnknownProjection, "unknown projection; see GET /v1/projections")
		return
	}
	infos, ok := h.serveInfos(w, r)
	if !ok {
		return
	}
	for _, in := range infos {
		if in.Name == name {
			h.respond(w, r, in)
			return
		}
	}
	h.fail(w, r, "status", errors.New("projection missing from the status"))
}

// serveInfos returns the projections' infos for a request that takes no
// parameters; false when it answered with the error instead.
func (h *handler) serveInfos(w http.ResponseWriter, r *http.Request) ([]ProjectionInfo, bool) {
	if _, msg := params(r, func(string) bool { return false }); msg != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, msg)
		return nil, false
	}
	infos, err := h.infos(r.Context())
	if err != nil {
		h.fail(w, r, "status", err)
		return nil, false
	}
	return infos, true
}

// status serves the operator summary.
func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	if _, msg := params(r, func(string) bool { return false }); msg != "" {
		writeError(w, http.StatusBadRequest, CodeBadRequest, msg)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.RequestTimeout)
	defer cancel()
	st, err := Status(ctx, h.proc, h.opts.Effects)
	if err != nil {
		h.fail(w, r, "status", err)
		return
	}
	h.respond(w, r, st)
}
