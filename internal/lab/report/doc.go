// Package report is what a lab run reports: Result (one scenario in one
// mode, backend and traffic policy) with its figures and timeline, and the
// table, JSON and HTML renderings of a set of them.
package report
