// Package outside is a client outside the lab's own traffic generator
// (internal/lab/traffic), to check the lab's figures against: an open-loop
// client that starts requests at a fixed rate whatever the answers, each a
// new TCP connection and one HTTP GET bounded by a timeout, and counts what
// it saw (sent, failed by kind, per second). It runs as a process of its
// own (`zerodrop lab outside-client`, the lab binary re-executed) in the
// lab's client network namespace, started by the lab through
// internal/netlab (the supervisor) beside each run's traffic, and writes
// its counts to a file the lab reads when the run's traffic ends. It shares
// no code with internal/lab/traffic on purpose: a second measurement that
// reused the first one's client would agree with it by construction.
package outside
