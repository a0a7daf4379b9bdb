package aws

import (
	"fmt"
	"io"
	"os"
	"strings"

	"zerodrop.dev/zerodrop/internal/cmd/controller"
	"zerodrop.dev/zerodrop/internal/emulated/awsapi"
	"zerodrop.dev/zerodrop/internal/lab/worlds/controllerpod"
)

// zerodrop's controller pods on emulated AWS (gates mode) run `zerodrop
// lab aws-controller`: `zerodrop controller --provider aws` as shipped
// (controller.RunConfig, the SDK's default credential chain), its
// environment set as a user's would be for the emulator: the emulator's
// second key pair, so that its record tells zerodrop's calls from the
// CCM's (record.go), and the authority of its certificate.

// Command is the lab subcommand of an AWS controller process.
const Command = "aws-controller"

// controllerEnv is the environment a controller process sets for the SDK's
// default chain: the second key, the emulator's authority, instance
// metadata off, no shared file of this user's read; unset are the
// variables that would take precedence or send the calls elsewhere.
func controllerEnv(caFile string) (set map[string]string, unset []string) {
	return map[string]string{
			"AWS_ACCESS_KEY_ID":           awsapi.SecondAccessKeyID,
			"AWS_SECRET_ACCESS_KEY":       awsapi.SecondSecretAccessKey,
			"AWS_CA_BUNDLE":               caFile,
			"AWS_EC2_METADATA_DISABLED":   "true",
			"AWS_CONFIG_FILE":             os.DevNull,
			"AWS_SHARED_CREDENTIALS_FILE": os.DevNull,
		}, []string{"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE",
			"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"}
}

// ControllerMain is `zerodrop lab aws-controller --emulator-ca=FILE
// CONTROLLER-FLAGS…`.
func ControllerMain(args []string, stderr io.Writer) int {
	if len(args) < 1 || !strings.HasPrefix(args[0], "--emulator-ca=") {
		fmt.Fprintln(stderr, "zerodrop lab aws-controller: want --emulator-ca=FILE, then the controller's flags")
		return 2
	}
	cfg, err := controller.ParseArgs(args[1:])
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop lab aws-controller: %v\n", err)
		return 2
	}
	set, unset := controllerEnv(strings.TrimPrefix(args[0], "--emulator-ca="))
	for _, k := range unset {
		_ = os.Unsetenv(k)
	}
	for k, v := range set {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintf(stderr, "zerodrop lab aws-controller: %v\n", err)
			return 2
		}
	}
	return controllerpod.Run("zerodrop lab aws-controller", cfg, stderr)
}
