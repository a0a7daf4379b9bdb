package bgp

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// quietHandler passes GoBGP's logs through, except, once silenced, the one
// error BgpServer.Stop logs when the server was already stopped by StopBgp:
// the speaker stops that way on purpose (StopBgp is the only call that can
// skip the NOTIFICATION), and an error on every clean hand-over would teach
// operators to ignore errors.
type quietHandler struct {
	slog.Handler
	silenced *atomic.Bool // shared with the handlers derived from this one
}

func newQuietHandler(h slog.Handler) *quietHandler {
	return &quietHandler{Handler: h, silenced: new(atomic.Bool)}
}

func (h *quietHandler) silence() { h.silenced.Store(true) }

func (h *quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.silenced.Load() && r.Message == "failed to stop BGP server" {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs and WithGroup keep the filter on derived loggers (GoBGP derives
// one per peer).
func (h *quietHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &quietHandler{Handler: h.Handler.WithAttrs(attrs), silenced: h.silenced}
}

func (h *quietHandler) WithGroup(name string) slog.Handler {
	return &quietHandler{Handler: h.Handler.WithGroup(name), silenced: h.silenced}
}
