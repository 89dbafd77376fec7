package httpstatus_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/httpstatus"
)

func TestRecorder(t *testing.T) {
	t.Parallel()
	rec := &httpstatus.Recorder{ResponseWriter: httptest.NewRecorder()}
	require.False(t, rec.Wrote())
	require.Equal(t, http.StatusOK, rec.Status(), "nothing written: net/http sends 200")

	rec.WriteHeader(http.StatusServiceUnavailable)
	rec.WriteHeader(http.StatusOK) // superfluous: the first one counts
	require.True(t, rec.Wrote())
	require.Equal(t, http.StatusServiceUnavailable, rec.Status())

	w := httptest.NewRecorder()
	rec = &httpstatus.Recorder{ResponseWriter: w}
	_, err := rec.Write([]byte("body"))
	require.NoError(t, err)
	require.True(t, rec.Wrote())
	require.Equal(t, http.StatusOK, rec.Status())
	require.Equal(t, "body", w.Body.String())
	require.Same(t, w, http.ResponseWriter(rec.Unwrap()))
}
