package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"zerodrop.dev/zerodrop/internal/lab/netlab"
)

// The API server calls a Service-referenced webhook at the Service's
// ClusterIP, which exists only in the lab's node namespaces (kube-proxy
// translates it there), while the API server runs in the root namespace.
// So the API server gets an egress selector for its "cluster" traffic — the
// mechanism clusters use to reach webhooks through a network proxy
// (konnectivity) — pointing at an HTTP CONNECT proxy on a unix socket the
// lab serves, which dials the target from a node's namespace. The webhook's
// own Service, endpoints and kube-proxy rules are then the ones that carry
// the call, as in a cluster.

// egressSocket is the proxy's unix socket in the lab directory dir.
func EgressSocket(dir string) string { return filepath.Join(dir, "egress.sock") }

// egressConfig writes the API server's EgressSelectorConfiguration sending
// "cluster" traffic through the HTTP CONNECT proxy at socket; its path goes
// to --egress-selector-config-file.
func egressConfig(path, socket string) error {
	cfg := fmt.Sprintf(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds:
        udsName: %s
`, socket)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

// egressProxy is the HTTP CONNECT proxy behind the API server's egress
// selector: every CONNECT target is dialed with dial (from a node's
// namespace).
type EgressProxy struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	logf func(string, ...any)
	stop func()
}

// serveEgress listens on socket and serves CONNECT requests until close.
func ServeEgress(socket string, dial func(ctx context.Context, network, addr string) (net.Conn, error), logf func(string, ...any)) (*EgressProxy, error) {
	_ = os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	p := &EgressProxy{dial: dial, logf: logf}
	p.stop = netlab.Serve(ln, p.serve)
	return p, nil
}

func (p *EgressProxy) serve(c net.Conn, track func(net.Conn) bool) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	up, err := p.dial(ctx, "tcp", req.Host)
	cancel()
	if err != nil {
		p.logf("egress proxy: CONNECT %s: %v", req.Host, err)
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	if !track(up) {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst net.Conn, src io.Reader) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		done <- struct{}{}
	}
	// What the client sent after the request line is in br's buffer.
	go cp(up, br)
	go cp(c, up)
	<-done
	<-done
}

// close stops listening, ends every proxied connection and waits.
func (p *EgressProxy) Close() { p.stop() }
