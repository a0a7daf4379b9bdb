package scenarios

import (
	"k8s.io/apimachinery/pkg/types"

	"zerodrop.dev/zerodrop/internal/lab/world"
)

// A run's data plane of replicas is its world's (world.DataPlane: the
// lab's HAProxy replicas, the chart's DaemonSet). What is here is the
// runner's side of it: the replicas' figures and the controllers' scrapes
// of their processes.

// dataPlane is the run's data plane of replicas (nil: none).
func (r *run) dataPlane() world.DataPlane {
	dp, _ := r.world.(world.DataPlane)
	return dp
}

// scrapeDataPlane reads every running data-plane process's metrics (writes
// and conflicts it reports itself), keyed by process.
func (cs *controllers) scrapeDataPlane() {
	if dp := cs.run.dataPlane(); dp != nil {
		for _, s := range dp.Scrapes() {
			cs.scrapeAt(types.UID(s.Key), s.Name, s.IP)
		}
	}
}
