package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inorder/inorder/effects"
	"github.com/inorder/inorder/internal/ops"
	"github.com/inorder/inorder/projection"
)

// ActionTimeout bounds one write request (a bulk run acts on 1,000 items at
// most).
const ActionTimeout = 50 * time.Second

// maxActor bounds the "actor" a write request names.
const maxActor = 64

// actionBody is a write request's body: the action's fields (see the
// package documentation), and who acts.
type actionBody struct {
	ops.Request
	// Actor names who acts, for the operator log ("alice"); recorded as
	// "http:<actor>".
	Actor string `json:"actor"`
}

// action previews (dry run) or, with "confirm": true, carries out an
// operator action.
func (h *handler) action(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength > h.opts.MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is too large")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, CodePayloadTooLarge, "the request body is too large")
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, CodeBadRequest, "the request body could not be read")
		return
	}
	var b actionBody
	if len(strings.TrimSpace(string(body))) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&b); err != nil {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "the body must be a JSON object of the action's fields")
			return
		}
	}
	b.Action = r.PathValue("action")
	for _, s := range []string{b.Projection, b.Aggregate, b.Key, b.Kind, b.State, b.Reason, b.Actor} {
		if !validText(s) {
			writeError(w, http.StatusBadRequest, CodeBadRequest, "every text field "+textRule)
			return
		}
	}
	if len(b.Actor) > maxActor || !utf8.ValidString(b.Actor) {
		writeError(w, http.StatusBadRequest, CodeBadRequest, "actor must be at most 64 bytes")
		return
	}
	b.By = "http:" + b.Actor
	if b.Actor == "" {
		b.By = "http:admin-token"
	}
	ctx, cancel := context.WithTimeout(r.Context(), ActionTimeout)
	defer cancel()
	e := &ops.Engine{Proc: h.proc, Effects: h.opts.EffectsClient, Rebuilds: h.opts.Rebuilds, Repairs: h.opts.Repairs}
	res, err := e.Do(ctx, b.Request)
	if b.Confirm {
		h.log.InfoContext(r.Context(), "http api action", "action", b.Action, "by", b.By, "projection", b.Projection,
			"aggregate", b.Aggregate, "id", b.ID, "done", res.Done, "failed", res.Failed, "error", err)
	}
	if err != nil {
		h.actionError(w, r, err)
		return
	}
	if res.Items == nil {
		res.Items = []any{}
	}
	h.respond(w, r, res)
}

// actionError answers an action's error: a client's mistake with its
// message, anything else as fail does.
func (h *handler) actionError(w http.ResponseWriter, r *http.Request, err error) {
	var se *effects.StateError
	var herr *projection.HandlerError
	switch {
	case errors.Is(err, ops.ErrBadRequest), errors.Is(err, projection.ErrBadGap):
		writeError(w, http.StatusBadRequest, CodeBadRequest, err.Error())
	case errors.Is(err, projection.ErrUnknownProjection):
		writeError(w, http.StatusNotFound, CodeUnknownProjection, err.Error())
	case errors.Is(err, projection.ErrNotFound), errors.Is(err, projection.ErrNoGeneration), errors.Is(err, effects.ErrNotFound):
		writeError(w, http.StatusNotFound, CodeNotFound, err.Error())
	case errors.Is(err, ops.ErrChanged), errors.Is(err, projection.ErrNotQuarantined), errors.Is(err, projection.ErrQuarantined),
		errors.Is(err, projection.ErrLiveGeneration), errors.Is(err, projection.ErrNoPrevious), errors.Is(err, projection.ErrBuildInProgress), errors.Is(err, projection.ErrNotReady),
		errors.As(err, &se), errors.As(err, &herr):
		writeError(w, http.StatusConflict, CodeConflict, err.Error())
	case errors.Is(err, ops.ErrUnsupported):
		writeError(w, http.StatusNotImplemented, CodeNotImplemented, err.Error())
	default:
		h.fail(w, r, fmt.Sprintf("action %s", r.PathValue("action")), err)
	}
}
