// Package azurewrites is the world of emulated Azure counting writes
// (world.AzureWrites): --provider azure-emulator's scenarios without
// traffic (restart, restart-idle, churn, kill-mid-plan, shared-lb), where
// zerodrop and the real cloud-controller-manager of cloud-provider-azure
// write the ARM emulator and the figures are the writes the emulator saw.
// See docs/azure.md.
package azurewrites
