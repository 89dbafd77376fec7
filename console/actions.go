package console

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/ops"
	"github.com/inorder/inorder/projection"
	"github.com/inorder/inorder/source"
)

// actionTimeout bounds one action request (a bulk run acts on ops.BulkMax
// items at most).
const actionTimeout = 50 * time.Second

// previewData is the preview (or result) page of an action.
type previewData struct {
	Action   string
	Title    string
	Summary  string
	Done     bool
	Columns  []string
	Rows     [][]string
	RowsCut  bool
	Failures []string
	// Confirm is the confirmation button's label; Fields the form's
	// hidden fields: the preview's request, as it was.
	Confirm string
	Fields  []field
	Back    string
}

type field struct{ Name, Value string }

// act previews or carries out an action posted by a console form: admin
// session, same origin (ServeHTTP), form token.
func (h *handler) act(w http.ResponseWriter, r *http.Request) {
	s, ok := h.session(r)
	if !ok || !s.Admin || h.opts.AdminToken == "" {
		h.render(w, r, http.StatusForbidden, "error", view{Title: "Forbidden", Error: "actions need a login with the admin token"})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		h.render(w, r, http.StatusBadRequest, "error", view{Title: "Bad request", Error: "the form could not be read"})
		return
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(h.csrf(s))) {
		h.render(w, r, http.StatusForbidden, "error", view{Title: "Forbidden", Error: "the form's token is missing or stale: reload the page"})
		return
	}
	f := r.PostForm
	req := ops.Request{Action: r.PathValue("action"), Projection: f.Get("projection"), Aggregate: f.Get("aggregate"),
		Key: f.Get("key"), Kind: f.Get("kind"), State: f.Get("state"), Reason: f.Get("reason"), Confirm: f.Get("confirm") == "1", ExpectChanges: f.Get("expect_changes") == "1",
		By: "console:" + s.Name}
	var bad error
	num := func(name string, into *int64) {
		if v := f.Get(name); v != "" && bad == nil {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				bad = fmt.Errorf("%s must be an integer", name)
			}
			*into = n
		}
	}
	var gen int64
	num("id", &req.ID)
	num("to", &req.To)
	num("expect", &req.Expect)
	num("generation", &gen)
	req.Generation = int(gen)
	if v := f.Get("as_of"); v != "" && bad == nil {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			bad = errors.New("as_of must be a time")
		}
		req.AsOf = t
	}
	back := r.Referer()
	if back == "" || !sameHostURL(back, r.Host) {
		back = h.opts.Prefix
	}
	if bad != nil {
		h.render(w, r, http.StatusBadRequest, "preview", view{Title: "Bad request", Error: bad.Error(), Data: previewData{Title: req.Action, Back: back}})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), actionTimeout)
	defer cancel()
	res, err := h.engine().Do(ctx, req)
	d := previewData{Action: req.Action, Title: title(req), Back: f.Get("back")}
	if d.Back == "" || !sameHostURL(d.Back, r.Host) {
		d.Back = back
	}
	if err != nil && !req.Confirm {
		status, msg := h.actionError(r, err)
		h.render(w, r, status, "preview", view{Title: d.Title, Error: msg, Data: d})
		return
	}
	if req.Confirm {
		h.log.InfoContext(r.Context(), "console action", "action", req.Action, "by", req.By, "projection", req.Projection,
			"aggregate", req.Aggregate, "id", req.ID, "done", res.Done, "failed", res.Failed, "error", err)
	}
	d.Summary, d.Done, d.Failures = res.Message, req.Confirm, res.Failures
	d.Columns, d.Rows = table(res.Items)
	d.RowsCut = res.Matched > int64(len(d.Rows)) && !req.Confirm
	if req.Confirm && err != nil {
		status, msg := h.actionError(r, err)
		h.render(w, r, status, "preview", view{Title: d.Title, Error: msg, Data: d})
		return
	}
	if !req.Confirm && res.Matched > 0 {
		d.Fields = []field{{"projection", req.Projection}, {"aggregate", req.Aggregate}, {"key", req.Key}, {"kind", req.Kind},
			{"state", req.State}, {"reason", req.Reason}, {"back", d.Back}}
		if req.ExpectChanges {
			d.Fields = append(d.Fields, field{"expect_changes", "1"})
		}
		for _, n := range []struct {
			name string
			v    int64
		}{{"id", req.ID}, {"to", req.To}, {"generation", gen}} {
			if n.v != 0 {
				d.Fields = append(d.Fields, field{n.name, strconv.FormatInt(n.v, 10)})
			}
		}
		if !res.AsOf.IsZero() {
			d.Fields = append(d.Fields, field{"as_of", res.AsOf.Format(time.RFC3339Nano)}, field{"expect", strconv.FormatInt(res.Matched, 10)})
			d.Confirm = fmt.Sprintf("Confirm: %s %d item(s)", verbOf(req.Action), min(res.Matched, ops.BulkMax))
		} else {
			d.Confirm = "Confirm: " + verbOf(req.Action)
		}
	}
	if req.Confirm && res.Remaining > 0 && res.Done > 0 {
		d.Summary += fmt.Sprintf(" — %d more match what you confirmed: preview again to go on", res.Remaining)
	}
	h.render(w, r, http.StatusOK, "preview", view{Title: d.Title, Data: d})
}

// engine is the action engine on the console's processor.
func (h *handler) engine() *ops.Engine {
	e := &ops.Engine{Proc: h.proc, Effects: h.opts.Effects, Repairs: h.opts.Repairs}
	if h.opts.Rebuilds != nil {
		e.Rebuilds = rebuildStarter{h}
	}
	return e
}

// rebuildStarter records a console-started rebuild's progress for the
// rebuild page.
type rebuildStarter struct{ h *handler }

func (s rebuildStarter) StartRebuild(ctx context.Context, name, by string, opts *projection.BuildOptions, _ func(error)) error {
	if !s.h.builds.start(name, by) {
		return fmt.Errorf("%w (started from this console)", projection.ErrBuildInProgress)
	}
	o := *opts
	o.Progress = func(p projection.BuildProgress) { s.h.builds.progress(name, p) }
	err := s.h.opts.Rebuilds.StartRebuild(ctx, name, by, &o, func(err error) { s.h.builds.finish(name, err) })
	if err != nil {
		s.h.builds.finish(name, err)
	}
	return err
}

// actionError maps an action's error to a status and a message for the
// page. Library errors name what was wrong with the request; others are
// logged and not shown.
func (h *handler) actionError(r *http.Request, err error) (int, string) {
	var se *effects.StateError
	var herr *projection.HandlerError
	switch {
	case errors.Is(err, ops.ErrBadRequest), errors.Is(err, projection.ErrBadGap):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, projection.ErrUnknownProjection), errors.Is(err, projection.ErrNotFound),
		errors.Is(err, projection.ErrNoGeneration), errors.Is(err, effects.ErrNotFound):
		return http.StatusNotFound, err.Error()
	case errors.Is(err, ops.ErrChanged), errors.Is(err, projection.ErrNotQuarantined), errors.Is(err, projection.ErrQuarantined),
		errors.Is(err, projection.ErrLiveGeneration), errors.Is(err, projection.ErrNoPrevious), errors.Is(err, projection.ErrBuildInProgress), errors.Is(err, projection.ErrNotReady),
		errors.As(err, &se), errors.As(err, &herr):
		return http.StatusConflict, err.Error()
	case errors.Is(err, ops.ErrUnsupported):
		return http.StatusNotImplemented, err.Error()
	}
	h.log.ErrorContext(r.Context(), "console action failed", "path", r.URL.Path, "error", err)
	return http.StatusInternalServerError, "the action failed (logged)"
}

func title(r ops.Request) string {
	what := map[string]string{ops.Retry: "Retry a quarantined event", ops.Skip: "Skip a quarantined event", ops.DeclareGap: "Declare a gap", ops.Repair: "Repair from the source",
		ops.Replay: "Replay a rejected delivery", ops.Dismiss: "Dismiss a rejected delivery", ops.Ack: "Acknowledge a conflict",
		ops.RebuildStart: "Start a rebuild", ops.RebuildSwitch: "Switch a generation in", ops.RebuildRollback: "Roll back", ops.RebuildDrop: "Drop a generation",
		ops.EffectsRetry: "Retry an effect", ops.BulkRetry: "Retry every matching quarantined event",
		ops.BulkSkip: "Skip every matching quarantined event", ops.BulkDismiss: "Dismiss every matching rejected delivery",
		ops.BulkAck: "Acknowledge every matching conflict", ops.BulkEffectsRetry: "Retry every matching effect"}[r.Action]
	if what == "" {
		return r.Action
	}
	if r.Confirm {
		return what + ": done"
	}
	return what + ": preview"
}

func verbOf(action string) string {
	switch action {
	case ops.BulkRetry, ops.Retry, ops.EffectsRetry, ops.BulkEffectsRetry:
		return "retry"
	case ops.BulkSkip, ops.Skip:
		return "skip"
	case ops.BulkDismiss, ops.Dismiss:
		return "dismiss"
	case ops.BulkAck, ops.Ack:
		return "acknowledge"
	case ops.DeclareGap:
		return "declare the gap"
	case ops.Repair:
		return "repair"
	case ops.Replay:
		return "replay"
	case ops.RebuildStart:
		return "start the rebuild"
	case ops.RebuildSwitch:
		return "switch it in"
	case ops.RebuildRollback:
		return "roll back"
	case ops.RebuildDrop:
		return "drop the generation"
	}
	return action
}

// table turns a result's items into the preview's columns and rows.
func table(items any) ([]string, [][]string) {
	list, _ := items.([]any)
	var cols []string
	var rows [][]string
	for _, it := range list {
		var row []string
		switch x := it.(type) {
		case projection.QuarantineEntry:
			cols = []string{"Projection", "Aggregate", "Version", "Type", "Attempts", "Error"}
			row = []string{x.Projection, x.Aggregate, itoa(x.Version), x.Type, strconv.Itoa(x.Attempts), x.Error}
		case projection.RejectedEntry:
			cols = []string{"ID", "Aggregate", "Version", "Type", "Reason", "Error"}
			row = []string{itoa(x.ID), x.Aggregate, itoa(x.Version), x.Type, x.Reason, x.Error}
		case projection.ConflictEntry:
			cols = []string{"ID", "Projection", "Aggregate", "Version", "Held by", "Incoming id"}
			row = []string{itoa(x.ID), x.Projection, x.Aggregate, itoa(x.Version), x.ExistingState, x.IncomingEventID}
		case projection.AggregateState:
			cols = []string{"Projection", "Aggregate", "Version", "Parked"}
			row = []string{x.Projection, x.Aggregate, itoa(x.Version), itoa(x.Parked)}
		case projection.Generation:
			cols = []string{"Projection", "Generation", "State", "Code version"}
			row = []string{x.Projection, strconv.Itoa(x.Generation), x.State, strconv.Itoa(x.CodeVersion)}
		case source.Repair:
			cols = []string{"Aggregate", "From", "To", "Found", "Missing", "Outcomes"}
			row = []string{x.Aggregate, itoa(x.From), itoa(x.To), strconv.Itoa(x.Found), strings.Join(x.Missing, ", "), fmt.Sprint(x.Outcomes)}
		case effects.Effect:
			cols = []string{"Key", "Kind", "Aggregate", "State", "Attempts", "Last error"}
			row = []string{x.Key, x.Kind, x.Aggregate, string(x.State), strconv.Itoa(x.Attempts), x.LastError}
		default:
			continue
		}
		rows = append(rows, row)
	}
	return cols, rows
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
