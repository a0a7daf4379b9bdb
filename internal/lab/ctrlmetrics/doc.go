// Package ctrlmetrics reads what a controller says it did from its metrics
// endpoint (writes, conflicts, reconciles, drain outcomes, leadership): the
// lab and the Azure lab compare it with the writes counted where they land.
package ctrlmetrics
