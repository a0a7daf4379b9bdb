package haproxy

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// HAProxy proxy and server names may only contain letters, digits and
// '-', '_', '.', ':'. Load balancer keys ("namespace/name") and listener names
// ("namespace/name/tcp-80") contain '/', so they are encoded reversibly:
//
//	'/'                  → '.'
//	[A-Za-z0-9-]         → itself
//	any other byte       → '_' and two lower-case hex digits ("." → "_2e")
//
// The encoding never produces ':', which separates the parts of a proxy name:
//
//	zd:<key>:<rest>    when the listener is named "<key>/<rest>" (the usual case)
//	zd:<key>::<name>   otherwise
//
// so "default/web" + "default/web/tcp-80" becomes "zd:default.web:tcp-80".

// proxyPrefix marks the proxies zerodrop owns; the others are left alone by
// Observe.
const proxyPrefix = "zd:"

func encodeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			b.WriteByte('.')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return b.String()
}

func decodeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			b.WriteByte('/')
		case c == '_':
			if i+2 >= len(s) {
				return "", fmt.Errorf("truncated escape in %q", s)
			}
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				return "", fmt.Errorf("bad escape in %q", s)
			}
			b.WriteByte(byte(v))
			i += 2
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-':
			b.WriteByte(c)
		default:
			return "", fmt.Errorf("unexpected %q in %q", c, s)
		}
	}
	return b.String(), nil
}

// proxyName is the name of the HAProxy proxy (a `listen` section) that serves
// listener of load balancer key.
func proxyName(key, listener string) string {
	if rest, ok := strings.CutPrefix(listener, key+"/"); ok && rest != "" {
		return proxyPrefix + encodeName(key) + ":" + encodeName(rest)
	}
	return proxyPrefix + encodeName(key) + "::" + encodeName(listener)
}

// parseProxyName reverses proxyName; ok is false for proxies zerodrop does not
// own.
func parseProxyName(name string) (key, listener string, ok bool) {
	rest, found := strings.CutPrefix(name, proxyPrefix)
	if !found {
		return "", "", false
	}
	encKey, encListener, found := strings.Cut(rest, ":")
	if !found || encKey == "" {
		return "", "", false
	}
	key, err := decodeName(encKey)
	if err != nil {
		return "", "", false
	}
	if full, isFull := strings.CutPrefix(encListener, ":"); isFull {
		listener, err = decodeName(full)
		if err != nil || listener == "" {
			return "", "", false
		}
		return key, listener, true
	}
	if encListener == "" {
		return "", "", false
	}
	suffix, err := decodeName(encListener)
	if err != nil {
		return "", "", false
	}
	return key, key + "/" + suffix, true
}

// serverName is the HAProxy server name of a backend: its address and port,
// with the characters HAProxy refuses escaped as in encodeName ('.' and ':'
// are allowed in server names and kept). "127.0.0.1:8080" stays as it is.
func serverName(address string, port int32) string {
	var b strings.Builder
	for i := 0; i < len(address); i++ {
		c := address[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '.', c == ':':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "_%02x", c)
		}
	}
	return fmt.Sprintf("%s:%d", b.String(), port)
}

// parseServerName reverses serverName.
func parseServerName(name string) (address string, port int32, err error) {
	i := strings.LastIndexByte(name, ':')
	if i <= 0 {
		return "", 0, fmt.Errorf("server name %q has no port", name)
	}
	p, err := strconv.ParseUint(name[i+1:], 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("server name %q: bad port", name)
	}
	var b strings.Builder
	enc := name[:i]
	for j := 0; j < len(enc); j++ {
		c := enc[j]
		if c != '_' {
			b.WriteByte(c)
			continue
		}
		if j+2 >= len(enc) {
			return "", 0, fmt.Errorf("server name %q: truncated escape", name)
		}
		v, err := strconv.ParseUint(enc[j+1:j+3], 16, 8)
		if err != nil {
			return "", 0, fmt.Errorf("server name %q: bad escape", name)
		}
		b.WriteByte(byte(v))
		j += 2
	}
	return b.String(), int32(p), nil
}

// hostPort renders an address and port the way HAProxy's configuration
// parser reads them (IPv6 addresses get the ipv6@ prefix, since HAProxy
// splits the port off at the last colon).
func hostPort(address string, port int32) string {
	if ip := net.ParseIP(address); ip != nil && ip.To4() == nil {
		return fmt.Sprintf("ipv6@%s:%d", address, port)
	}
	return fmt.Sprintf("%s:%d", address, port)
}
