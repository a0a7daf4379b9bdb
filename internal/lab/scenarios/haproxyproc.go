package scenarios

import (
	"fmt"
	"path/filepath"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// haproxyBinary is a wrapper that runs HAProxy in the load balancer's
// namespace: the lab starts it there, and a reload through the master CLI
// re-executes the master in the namespace it already has. It also moves the
// master CLI socket (`-S PATH,…`) to PATH.haproxy, where the lab's counting
// proxy at PATH forwards: a reload binds the master socket again by the path
// on its command line, so a proxy put in its place afterwards would be
// replaced at the first reload.
func (r *run) haproxyBinary() string {
	return filepath.Join(r.lab.dir, fmt.Sprintf("haproxy-%d.sh", r.id))
}

// stopHAProxy stops the HAProxy of dir that startHAProxy started, through
// its master socket, the proxy still in front, and returns Close's error.
// An old worker the master no longer lists (a run with hundreds of reloads,
// connections to vanished pods held for the server timeout) would outlive
// it: the lab ends every process of that HAProxy, by the configuration file
// on its command line.
func (r *run) stopHAProxy(prov *haproxy.Provider, dir string) error {
	err := prov.Close()
	if n := cluster.KillByArg(filepath.Join(dir, "haproxy.cfg")); n > 0 {
		r.lab.logf("%s: killed %d HAProxy processes of %s left after the master stopped", r.name(), n, dir)
	}
	return err
}
