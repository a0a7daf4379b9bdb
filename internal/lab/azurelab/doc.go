// Package azurelab is the lab with --provider azure-emulator: zerodrop (and
// an upstream-like configuration) against the Azure ARM emulator, with its
// own scenarios (restart, churn, kill-mid-plan), waits and table. It runs no
// traffic: its figures are the writes the emulator saw. See docs/azure.md.
package azurelab
