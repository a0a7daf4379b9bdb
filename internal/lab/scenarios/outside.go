package scenarios

import (
	"context"

	"zerodrop.dev/zerodrop/internal/lab/outside"
	"zerodrop.dev/zerodrop/internal/lab/report"
)

// startOutside starts the outside client (Options.OutsideRate, off at 0)
// in the client namespace, to the run's frontend, as the lab's own traffic
// starts; it stops when tctx ends, as the lab's schedule does. The
// function it returns waits for its counts and puts them in res beside the
// lab's, so it is called after res has the lab's figures.
func (r *run) startOutside(tctx context.Context) (done func(res *report.Result)) {
	rate := r.lab.opts.OutsideRate
	if rate <= 0 {
		return func(*report.Result) {}
	}
	c, err := outside.Start(r.lab.net.Net, r.lab.net.Client.Netns, r.lab.opts.Executable, r.dir, r.addr, rate)
	if err != nil {
		return func(res *report.Result) { res.Outside = &report.OutsideFigures{Rate: rate, Error: err.Error()} }
	}
	var counts outside.Counts
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-tctx.Done()
		counts, err = c.Stop()
	}()
	return func(res *report.Result) {
		<-stopped
		o := &report.OutsideFigures{Rate: rate}
		res.Outside = o
		if err != nil {
			o.Error = err.Error()
			r.lab.logf("%s: outside client: %v", r.name(), err)
			return
		}
		o.Sent, o.Failed, o.FailedByKind = counts.Sent, counts.Failed, counts.FailedByKind
		for _, s := range counts.Seconds {
			o.Seconds = append(o.Seconds, [2]int64{s.Sent, s.Failed})
		}
		o.Compare(res.Requests, res.FailedRequests)
		r.lab.logf("%s: outside client: %d sent, %d failed %v (%.2f%%; the lab %.2f%%: %+.2f points; its latest start %.0f ms after its slot), schedule %s to %s",
			r.name(), o.Sent, o.Failed, o.FailedByKind, 100*o.FailedFraction, 100*o.LabFailedFraction, o.DifferencePoints, counts.LateMaxMs,
			counts.Start, counts.End)
	}
}
