package proctest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inorder/inorder/internal/proctest"
)

func TestMain(m *testing.M) {
	proctest.Main(m, map[string]proctest.Role{
		// echo answers each line with its upper case until EXIT.
		"echo": func(ctx context.Context, c *proctest.Child) error {
			c.Say("READY", c.Getenv("GREETING"))
			for {
				line, err := c.Await("")
				if err != nil {
					return err
				}
				if line == "EXIT" {
					return nil
				}
				c.Say("ECHO", strings.ToUpper(line))
			}
		},
		// wait runs until it is interrupted, then says so and exits 0.
		"wait": func(ctx context.Context, c *proctest.Child) error {
			c.Say("READY")
			<-ctx.Done()
			c.Say("STOPPED")
			return nil
		},
		"fail": func(ctx context.Context, c *proctest.Child) error {
			return context.DeadlineExceeded
		},
	})
}

func TestConversation(t *testing.T) {
	t.Parallel()
	p := proctest.Start(t, "echo", proctest.Options{Env: map[string]string{"GREETING": "hello there"}})
	require.Equal(t, "hello there", p.Expect(t, "READY"))
	p.Send(t, "ping")
	require.Equal(t, "PING", p.Expect(t, "ECHO"))
	p.Send(t, "EXIT")
	p.RequireExit(t)
	_, ok := p.Next(t)
	require.False(t, ok, "no line after the exit")
}

func TestInterruptDrains(t *testing.T) {
	t.Parallel()
	p := proctest.Start(t, "wait", proctest.Options{})
	p.Expect(t, "READY")
	p.Interrupt(t)
	p.Expect(t, "STOPPED")
	p.RequireExit(t)
}

func TestKill(t *testing.T) {
	t.Parallel()
	p := proctest.Start(t, "wait", proctest.Options{})
	p.Expect(t, "READY")
	p.Kill(t)
	require.NotContains(t, p.Output(), "STOPPED", "SIGKILL gives no chance to stop")
}

func TestFailingRole(t *testing.T) {
	t.Parallel()
	p := proctest.Start(t, "fail", proctest.Options{})
	err := p.Wait(t)
	require.Error(t, err)
	require.Contains(t, p.Output(), "role fail: context deadline exceeded")
}
