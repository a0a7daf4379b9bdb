// Package testnet has network fixtures for tests, with no dependency on the
// rest of the project (so that any package's own tests can use them).
package testnet

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"
)

// SilentPort returns a port on the IPv4 loopback address addr that drops
// SYNs, as the address of a pod that is gone (or a lost node) does: a
// listener with a backlog of 0 whose accept queue is full and never
// accepted, so the kernel drops further SYNs instead of refusing them. It
// fails the test when the queue cannot be filled.
func SilentPort(t testing.TB, addr string) int {
	t.Helper()
	ip := net.ParseIP(addr).To4()
	if ip == nil {
		t.Fatalf("SilentPort: %q is not an IPv4 address", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte(ip)}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	// Fill the accept queue; once it is full a connection attempt hangs.
	for i := 0; i < 8; i++ {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("%s:%d", addr, port), 2*time.Second)
		if err != nil {
			return port
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatalf("SilentPort: 8 connections to %s:%d accepted into a queue of 0: cannot make a connect hang here", addr, port)
	return 0
}
