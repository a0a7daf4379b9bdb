// Package check is the `zerodrop check` command: a rollout-safety analyzer
// for the workloads behind Services of type LoadBalancer, reading manifests
// (files, directories, stdin) or a live cluster. The command contract (flags,
// exit codes, JSON shape, rule IDs) is fixed in DESIGN.md.
package check

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"zerodrop.dev/zerodrop/internal/check/manifest"
	"zerodrop.dev/zerodrop/internal/check/render"
	"zerodrop.dev/zerodrop/internal/check/rules"
	"zerodrop.dev/zerodrop/internal/check/timing"
)

// Exit codes.
const (
	// ExitOK means no finding of severity error.
	ExitOK = 0
	// ExitFindings means at least one finding of severity error.
	ExitFindings = 1
	// ExitUsage means a usage error, an unreadable input or a document that
	// could not be parsed (reported with file:line).
	ExitUsage = 2
)

const usageLine = "zerodrop check [-o text|json|sarif] [--provider generic|azure|aws|gke|haproxy] [--explain]\n" +
	"       [--config FILE] [--disable ZD301,…] [--enable ZD301,…] [--fail-on error|warning|none] PATH|- …\n" +
	"       zerodrop check --cluster [--kubeconfig FILE] [--context NAME] [-n NAMESPACE …|--all-namespaces] [flags]"

// options are the parsed command line.
type options struct {
	output     string
	provider   timing.Provider
	explain    bool
	overrides  timing.Overrides
	paths      []string
	cluster    bool
	kubeconfig string
	context    string
	namespaces []string
	allNS      bool
	// CI settings; the config file fills what the flags leave unset.
	config          string
	disable, enable []string
	failOn          string
	disabled        map[string]bool // resolved from the file and the flags
}

// Run runs `zerodrop check` with the arguments that follow "check" and
// returns the exit code. Flags may come before, between or after the paths;
// "--" ends the flags.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, o := newFlagSet()
	if err := parseArgs(fs, o, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(stdout, fs)
			return ExitOK
		}
		fmt.Fprintf(stderr, "zerodrop check: %v\nusage: %s\nRun 'zerodrop check -h' for the flags.\n", err, usageLine)
		return ExitUsage
	}
	cfg, err := loadConfig(o.config)
	if err == nil {
		err = applyConfig(o, cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "zerodrop check: %v\n", err)
		return ExitUsage
	}

	var (
		objs []manifest.Object
		errs []error
	)
	if o.cluster {
		var warnings []string
		var err error
		objs, warnings, err = loadCluster(ctx, clusterOptions{
			kubeconfig: o.kubeconfig, context: o.context, namespaces: o.namespaces, all: o.allNS,
		})
		for _, w := range warnings {
			fmt.Fprintf(stderr, "zerodrop check: warning: %s\n", w)
		}
		if err != nil {
			fmt.Fprintf(stderr, "zerodrop check: %v\n", err)
			return ExitUsage
		}
	} else {
		objs, errs = manifest.Read(o.paths, stdin)
	}
	failed := false
	for _, err := range errs {
		fmt.Fprintf(stderr, "zerodrop check: %v\n", err)
		failed = failed || !manifest.IsSkipped(err)
	}

	rep, notes := analyzeWorlds(objs, rules.Config{Provider: o.provider, Overrides: o.overrides})
	rep = filter(rep, o.disabled)
	for _, n := range append(notes, rep.Notes...) {
		fmt.Fprintf(stderr, "zerodrop check: note: %s\n", n)
	}
	if err := render.Write(stdout, o.output, rep, render.Options{Explain: o.explain, Provider: string(o.provider)}); err != nil {
		fmt.Fprintf(stderr, "zerodrop check: write output: %v\n", err)
		return ExitUsage
	}
	switch {
	case failed:
		return ExitUsage
	case fails(rep, o.failOn):
		return ExitFindings
	}
	return ExitOK
}

// stringList is a repeatable flag that also splits on commas.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}

func newFlagSet() (*flag.FlagSet, *options) {
	o := &options{overrides: timing.NoOverrides}
	fs := flag.NewFlagSet("zerodrop check", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Run prints errors and usage itself
	fs.StringVar(&o.output, "o", render.FormatText, "output `format`: text, json or sarif")
	fs.StringVar(&o.output, "output", render.FormatText, "same as -o")
	fs.Func("provider", "load-balancer `provider` whose timings apply: generic, azure, aws, gke or haproxy (default generic)", func(v string) error {
		p, err := timing.ParseProvider(v)
		o.provider = p
		return err
	})
	fs.BoolVar(&o.explain, "explain", false, "print the arithmetic behind each finding (text output)")
	fs.IntVar(&o.overrides.Registration, "registration-seconds", -1, "override the load balancer's registration time, in `seconds`")
	fs.IntVar(&o.overrides.Deregistration, "deregistration-seconds", -1, "override the load balancer's deregistration time, in `seconds`")
	fs.BoolVar(&o.cluster, "cluster", false, "read the objects from the cluster of the current kubeconfig context (list only)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig `file` for --cluster (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.context, "context", "", "kubeconfig `context` for --cluster")
	ns := (*stringList)(&o.namespaces)
	fs.Var(ns, "namespace", "`namespace` to read with --cluster; repeatable (default: the context's)")
	fs.Var(ns, "n", "same as --namespace")
	fs.BoolVar(&o.allNS, "all-namespaces", false, "read every namespace with --cluster")
	fs.BoolVar(&o.allNS, "A", false, "same as --all-namespaces")
	fs.StringVar(&o.config, "config", "", "config `file` (default: "+ConfigFile+" in the working directory, if present)")
	fs.Var((*stringList)(&o.disable), "disable", "rule `IDs` not to check, comma-separated or repeated (all for every rule)")
	fs.Var((*stringList)(&o.enable), "enable", "rule `IDs` to check even if disabled (by the config file or all)")
	fs.StringVar(&o.failOn, "fail-on", "", "lowest `severity` that makes the exit status 1: error (default), warning or none")
	return fs, o
}

// parseArgs parses flags wherever they appear among the paths: the flag
// package stops at the first non-flag, so parsing resumes after each path.
func parseArgs(fs *flag.FlagSet, o *options, args []string) error {
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		consumed := len(rest) - fs.NArg()
		if consumed > 0 && rest[consumed-1] == "--" {
			o.paths = append(o.paths, fs.Args()...)
			break
		}
		if fs.NArg() == 0 {
			break
		}
		o.paths = append(o.paths, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if o.provider == "" {
		o.provider = timing.Generic
	}
	switch o.output {
	case render.FormatText, render.FormatJSON, render.FormatSARIF:
	default:
		return fmt.Errorf("unknown output format %q (want text, json or sarif)", o.output)
	}
	var errs []error
	fs.Visit(func(f *flag.Flag) {
		name := "--" + f.Name
		if len(f.Name) == 1 {
			name = "-" + f.Name
		}
		switch f.Name {
		case "registration-seconds", "deregistration-seconds":
			if f.Value.(flag.Getter).Get().(int) < 0 {
				errs = append(errs, fmt.Errorf("%s must be 0 or more", name))
			}
		case "kubeconfig", "context", "namespace", "n", "all-namespaces", "A":
			if !o.cluster {
				errs = append(errs, fmt.Errorf("%s needs --cluster", name))
			}
		}
	})
	switch {
	case len(errs) > 0:
		return errors.Join(errs...)
	case o.cluster && len(o.paths) > 0:
		return errors.New("--cluster reads the cluster: give no paths")
	case o.allNS && len(o.namespaces) > 0:
		return errors.New("--namespace and --all-namespaces exclude each other")
	case !o.cluster && len(o.paths) == 0:
		return errors.New("no input: give files, directories or - for stdin, or --cluster")
	}
	return nil
}

func printUsage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\nChecks the workloads behind Services of type LoadBalancer for configuration that drops traffic during rollouts.\nExit status: 0 no error finding, 1 at least one error finding, 2 usage or parse error.\n\nFlags:\n", usageLine)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
