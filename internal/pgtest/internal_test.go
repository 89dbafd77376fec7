package pgtest

import (
	"net"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithDatabase(t *testing.T) {
	got, err := withDatabase("postgres://u:p%40ss@h:5433/other?sslmode=disable", "inorder_test")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p%40ss@h:5433/inorder_test?sslmode=disable", got)

	_, err = withDatabase("host=h dbname=x", "inorder_test")
	require.ErrorContains(t, err, "postgres:// URL")
}

func TestWithSearchPath(t *testing.T) {
	got, err := withSearchPath("postgres://u@h/db?sslmode=disable", "t_1")
	require.NoError(t, err)
	require.Equal(t, "postgres://u@h/db?options=-c%20search_path%3Dt_1&sslmode=disable", got)

	got, err = withSearchPath("postgres://u@h/db?options=-c%20work_mem%3D8MB", "t_1")
	require.NoError(t, err)
	require.Equal(t, "postgres://u@h/db?options=-c%20work_mem%3D8MB%20-c%20search_path%3Dt_1", got)
}

// TestServerChoice checks that the server was chosen the documented way.
// Run with INORDER_PGTEST_PROBE_ADDR=127.0.0.1:1 to exercise the private
// cluster.
func TestServerChoice(t *testing.T) {
	BaseURL(t)
	t.Logf("server: %s", base.source)
	switch addr := os.Getenv(envProbeAddr); {
	case os.Getenv(envURL) != "":
		require.Equal(t, envURL, base.source)
	case addr != "" && !listening(addr):
		require.True(t, strings.HasPrefix(base.source, "private cluster in "), base.source)
	}
}

func listening(addr string) bool {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
