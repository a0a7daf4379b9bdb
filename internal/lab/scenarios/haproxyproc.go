package scenarios

import (
	"path/filepath"

	"zerodrop.dev/zerodrop/internal/lab/cluster"
	"zerodrop.dev/zerodrop/internal/provider/haproxy"
)

// stopHAProxy stops a data-plane replica's HAProxy of dir, through its
// master socket, the proxy still in front, and returns Close's error. An
// old worker the master no longer lists (a run with hundreds of reloads,
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
