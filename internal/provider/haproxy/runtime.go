package haproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// defaultCommandTimeout bounds one runtime API command when the context has
// no earlier deadline.
const defaultCommandTimeout = 10 * time.Second

// runtimeClient speaks HAProxy's runtime API (the CLI on a stats or master
// socket): one command per connection, the reply read to EOF. The master CLI
// only answers once the client has half-closed its side, so the client always
// shuts down writing after the command; the stats socket accepts that too.
type runtimeClient struct {
	path string
}

// do sends one command and returns HAProxy's reply as text. A reply is not
// checked here: HAProxy reports most errors as text with a successful
// transport (see expectEmpty and expectReply).
func (c runtimeClient) do(ctx context.Context, command string) (string, error) {
	return c.chain(ctx, command)
}

// chain sends commands on one line, separated by ';': HAProxy runs them one
// after the other in one go, with nothing else of the CLI in between. The
// replies come back concatenated.
func (c runtimeClient) chain(ctx context.Context, commands ...string) (string, error) {
	var reply strings.Builder
	err := c.stream(ctx, func(r io.Reader) error {
		// Into the string returned, without a copy.
		if _, err := io.Copy(&reply, r); err != nil {
			return fmt.Errorf("read: %w", err)
		}
		return nil
	}, commands...)
	return reply.String(), err
}

// stream is chain with the replies handed to consume as they arrive, never
// held whole: at thousands of load balancers a `show stat` is megabytes,
// and a reading parsed line by line holds only what it keeps. An error
// consume returns is the call's (the connection is closed, unread).
func (c runtimeClient) stream(ctx context.Context, consume func(io.Reader) error, commands ...string) error {
	for _, cmd := range commands {
		if strings.ContainsAny(cmd, "\n;") {
			// ';' chains commands on the CLI: refuse it inside one command.
			return fmt.Errorf("runtime command %q: newline or ';' not allowed", cmd)
		}
	}
	command := strings.Join(commands, "; ")
	ctx, cancel := context.WithTimeout(ctx, defaultCommandTimeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return fmt.Errorf("runtime command %q: %w", command, err)
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(deadline); err != nil {
			return fmt.Errorf("runtime command %q: %w", command, err)
		}
	}
	// Unblock the read when the context is canceled before the deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := io.WriteString(conn, command+"\n"); err != nil {
		return fmt.Errorf("runtime command %q: write: %w", command, err)
	}
	if uc, ok := conn.(*net.UnixConn); ok {
		if err := uc.CloseWrite(); err != nil {
			return fmt.Errorf("runtime command %q: half-close: %w", command, err)
		}
	}
	if err := consume(conn); err != nil {
		return fmt.Errorf("runtime command %q: %w", command, err)
	}
	return nil
}

// CommandError is a runtime API command that HAProxy refused; Reply is
// HAProxy's answer.
type CommandError struct {
	Command string
	Reply   string
}

func (e *CommandError) Error() string {
	return fmt.Sprintf("haproxy refused %q: %s", e.Command, strings.TrimSpace(e.Reply))
}

// expectEmpty checks the reply of a command that answers nothing on success
// (set server, enable health, shutdown sessions, …).
func expectEmpty(command, reply string) error {
	if strings.TrimSpace(reply) != "" {
		return &CommandError{Command: command, Reply: reply}
	}
	return nil
}

// expectReply checks the reply of a command that answers a fixed text on
// success ("New server registered.", "Server deleted.").
func expectReply(command, reply, want string) error {
	if strings.TrimSpace(reply) != want {
		return &CommandError{Command: command, Reply: reply}
	}
	return nil
}

// Replies HAProxy 2.6 gives that the provider acts on.
const (
	replyServerAdded   = "New server registered."
	replyServerDeleted = "Server deleted."
	replyNoSuchServer  = "No such server."
)

// isReply reports whether err is a CommandError whose reply is want.
func isReply(err error, want string) bool {
	var ce *CommandError
	return errors.As(err, &ce) && strings.TrimSpace(ce.Reply) == want
}
