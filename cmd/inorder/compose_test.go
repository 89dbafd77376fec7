package main_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// compose is the part of docker-compose.yml the test checks.
type compose struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Ports       []string          `yaml:"ports"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Build struct {
			Args map[string]string `yaml:"args"`
		} `yaml:"build"`
	} `yaml:"services"`
}

// TestComposeFile checks docker-compose.yml, .dockerignore and the
// Dockerfile structurally (no Docker engine in CI): a pinned KurrentDB
// image, health checks on every service (inorder's through its own
// healthcheck command, which must accept the arguments), secrets in the
// environment, ports on 127.0.0.1 by default, the version stamped; a pinned
// single-node Kafka (KRaft), a pinned NATS server with JetStream whose
// health check waits for JetStream, and the source chosen by
// INORDER_SOURCE.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var c compose
	require.NoError(t, yaml.Unmarshal(raw, &c))
	require.Len(t, c.Services, 5)

	kdb := c.Services["kurrentdb"]
	require.Regexp(t, `^\$\{KURRENTDB_IMAGE:-docker\.kurrent\.io/kurrent-latest/kurrentdb:\d+\.\d+\.\d+\}$`, kdb.Image, "a pinned tag")
	for k := range kdb.Environment {
		require.True(t, strings.HasPrefix(k, "KURRENTDB_"), "no pre-rebrand or obsolete settings: %s", k)
	}
	require.NotContains(t, string(raw), "EVENTSTORE_HTTP_PORT")

	kafka := c.Services["kafka"]
	require.Regexp(t, `^\$\{KAFKA_IMAGE:-apache/kafka:\d+\.\d+\.\d+\}$`, kafka.Image, "a pinned tag")
	require.Equal(t, "broker,controller", kafka.Environment["KAFKA_PROCESS_ROLES"], "KRaft: no ZooKeeper")
	require.Equal(t, "-1", kafka.Environment["KAFKA_LOG_RETENTION_MS"], "topics keep what a rebuild replays")

	nats := c.Services["nats"]
	require.Regexp(t, `^\$\{NATS_IMAGE:-nats:\d+\.\d+\.\d+-alpine\}$`, nats.Image, "a pinned tag")
	require.Contains(t, nats.Command, "--jetstream")
	require.Contains(t, strings.Join(nats.Healthcheck.Test, " "), "js-enabled-only=true", "healthy once JetStream is")
	require.Contains(t, nats.Ports, "${INORDER_BIND:-127.0.0.1}:${NATS_PORT:-4223}:4222", "not the host's 4222")

	bind := regexp.MustCompile(`^\$\{INORDER_BIND:-127\.0\.0\.1\}:`)
	for name, s := range c.Services {
		require.NotEmpty(t, s.Healthcheck.Test, "%s has a health check", name)
		for _, p := range s.Ports {
			require.Regexp(t, bind, p, "%s publishes on 127.0.0.1 by default", name)
		}
		for _, arg := range s.Command {
			require.NotRegexp(t, `(?i)password|postgres://|token`, arg, "%s: no secrets in command:", name)
		}
	}

	inorder := c.Services["inorder"]
	require.Equal(t, []string{"run", "--migrate"}, inorder.Command)
	require.Contains(t, inorder.Environment["DATABASE_URL"], "${POSTGRES_PASSWORD:-", "the password comes from the environment")
	require.Equal(t, "${INORDER_SOURCE:-}", inorder.Environment["INORDER_SOURCE"], "the source is chosen by INORDER_SOURCE")
	require.NotEmpty(t, inorder.Build.Args["VERSION"])
	hc := inorder.Healthcheck.Test
	require.Equal(t, []string{"CMD", "/usr/local/bin/inorder", "healthcheck"}, hc[:3], "no shell, no curl: the binary probes itself")
	// The arguments are valid: against a server that is not ready it fails
	// (1), it is not a usage error (2). The server is the test's own, on a
	// free port, given after the container's own arguments (the last
	// --http-addr wins): the test does not depend on what listens on
	// 127.0.0.1:8080 — a demo the README just started, say.
	var probes atomic.Int32
	notReady := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"unavailable","message":"not ready"}}`))
	}))
	defer notReady.Close()
	e := &env{vars: map[string]string{}}
	args := append(slices.Clone(hc[2:]), "--http-addr", strings.TrimPrefix(notReady.URL, "http://"), "--timeout", "5s")
	_, errOut, err := e.exec(t, args...)
	require.Equal(t, 1, exitCode(t, err), errOut)
	require.Positive(t, probes.Load(), "the health check probed the address it was given")

	ignore, err := os.ReadFile("../../.dockerignore")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^\.git$`, string(ignore))
	require.Regexp(t, `(?m)^\.env$`, string(ignore))
	docker, err := os.ReadFile("../../Dockerfile")
	require.NoError(t, err)
	require.Contains(t, string(docker), "-X main.version=${VERSION}", "the version is stamped")
	require.Regexp(t, `(?m)^ARG VERSION=`, string(docker))
}

// TestExamplesAreCopyable: no runnable example imports the module's
// internal packages, which a user's code cannot import.
func TestExamplesAreCopyable(t *testing.T) {
	t.Parallel()
	var examples []string
	require.NoError(t, filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "example_test.go" {
			examples = append(examples, path)
		}
		return nil
	}))
	require.Greater(t, len(examples), 3, "the examples are found")
	for _, path := range examples {
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			require.NotContains(t, imp.Path.Value, "github.com/inorder/inorder/internal/", "%s imports an internal package", path)
		}
	}
}
