package azure

import (
	"fmt"
	"io"
	"os"
	"strings"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/emulated/azurearm"
	"zerodrop.dev/zerodrop/internal/lab/worlds/controllerpod"
)

// zerodrop's controller pods on emulated Azure run `zerodrop lab
// azure-controller`: the command's own wiring (controller.RunConfig, what
// `zerodrop controller --provider azure` runs) with only the ARM endpoint
// and credential replaced by the emulator's, served over HTTPS.

// Command is the lab subcommand of an Azure controller process.
const Command = "azure-controller"

// zerodropIdentity names zerodrop's requests in the emulator's record.
const zerodropIdentity = "zerodrop"

// ControllerMain is `zerodrop lab azure-controller --emulator=URL
// --emulator-ca=FILE CONTROLLER-FLAGS…`.
func ControllerMain(args []string, stderr io.Writer) int {
	if len(args) < 2 || !strings.HasPrefix(args[0], "--emulator=") || !strings.HasPrefix(args[1], "--emulator-ca=") {
		fmt.Fprintln(stderr, "zerodrop lab azure-controller: want --emulator=URL --emulator-ca=FILE, then the controller's flags")
		return 2
	}
	cfg, err := controller.ParseArgs(args[2:])
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 2
	}
	caPEM, err := os.ReadFile(strings.TrimPrefix(args[1], "--emulator-ca="))
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 2
	}
	if cfg.Azure.Credential, cfg.Azure.ClientOptions, err = azurearm.Remote(strings.TrimPrefix(args[0], "--emulator="), caPEM, zerodropIdentity); err != nil {
		fmt.Fprintf(stderr, "zerodrop lab azure-controller: %v\n", err)
		return 2
	}
	return controllerpod.Run("zerodrop lab azure-controller", cfg, stderr)
}
