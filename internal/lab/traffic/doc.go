// Package traffic is the lab's traffic: the open-loop request clients and
// the long WebSocket clients that record what they saw (Recorder), and the
// web pod's server, which answers them from inside a pod's namespace with a
// graceful or abrupt end at SIGTERM. Its waits (SleepCtx, WaitFor) are the
// ones the lab's other packages use too.
package traffic
